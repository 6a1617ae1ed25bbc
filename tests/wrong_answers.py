"""Plausible wrong answers to every graded task of the course, and correct answers written another
way. tests/unit/test_wrong_answers.py checks that each wrong one fails a public case and each
right one passes every case, as the grader would judge them.

Each entry is (what it gets wrong, the source of the learner's graded function). A source may
call the other tasks' functions of its chapter (the master's, as a learner's own would be).
"""
from textwrap import dedent

NP = "import numpy as np\n\n"
TORCH = "import numpy as np\nimport torch\n\n"


def _src(body: str, prelude: str = NP) -> str:
    return prelude + dedent(body).strip() + "\n"


WRONG = {
    # --- 01: the bottleneck ------------------------------------------------------------------
    "01.1": [
        ("forgets (N-1)/N: every worker sends the gradient twice", _src("""
            def ring_allreduce_bytes(n_params, bytes_per_param, workers):
                return 2.0 * n_params * bytes_per_param if workers > 1 else 0.0""")),
        ("counts the reduce-scatter only", _src("""
            def ring_allreduce_bytes(n_params, bytes_per_param, workers):
                return (workers - 1) / workers * n_params * bytes_per_param""")),
        ("a whole gradient per step instead of a chunk", _src("""
            def ring_allreduce_bytes(n_params, bytes_per_param, workers):
                return 2 * (workers - 1) * n_params * bytes_per_param""")),
        ("counts parameters, not bytes", _src("""
            def ring_allreduce_bytes(n_params, bytes_per_param, workers):
                return 2 * (workers - 1) / workers * n_params""")),
    ],
    "01.2": [
        ("gigabits taken for gigabytes", _src("""
            def ring_allreduce_time(nbytes, workers, gbit_per_s, latency_s):
                steps = 2 * (workers - 1)
                return steps * latency_s + steps / workers * nbytes / (gbit_per_s * 1e9)""")),
        ("the latency paid once, not once per step", _src("""
            def ring_allreduce_time(nbytes, workers, gbit_per_s, latency_s):
                if workers == 1:
                    return 0.0
                return latency_s + 2 * (workers - 1) / workers * nbytes / (gbit_per_s * 125e6)""")),
        ("the whole message in every step", _src("""
            def ring_allreduce_time(nbytes, workers, gbit_per_s, latency_s):
                return 2 * (workers - 1) * (latency_s + nbytes / (gbit_per_s * 125e6))""")),
    ],
    "01.3": [
        ("waiting measured against the compute time", _src("""
            def iteration_time(compute_s, n_params, bytes_per_param, workers, gbit_per_s, latency_s):
                steps = 2 * (workers - 1)
                comm = steps * latency_s + steps / workers * n_params * bytes_per_param / (gbit_per_s * 125e6)
                return compute_s + comm, (comm / compute_s if compute_s > 0 else 0.0)""")),
        ("no latency", _src("""
            def iteration_time(compute_s, n_params, bytes_per_param, workers, gbit_per_s, latency_s):
                comm = 2 * (workers - 1) / workers * n_params * bytes_per_param / (gbit_per_s * 125e6)
                total = compute_s + comm
                return total, (comm / total if total > 0 else 0.0)""")),
        ("divides by a zero total", _src("""
            def iteration_time(compute_s, n_params, bytes_per_param, workers, gbit_per_s, latency_s):
                steps = 2 * (workers - 1)
                comm = steps * latency_s + steps / workers * n_params * bytes_per_param / (gbit_per_s * 125e6)
                return compute_s + comm, comm / (compute_s + comm)""")),
    ],
    "01.4": [
        ("sees only the bandwidth term: latency never hurts", _src("""
            def largest_cluster(compute_s, nbytes, gbit_per_s, latency_s, max_waiting):
                comm_limit = 2 * nbytes / (gbit_per_s * 125e6)
                if comm_limit / (compute_s + comm_limit) <= max_waiting:
                    return float("inf")
                n = 1
                while True:
                    comm = 2 * n / (n + 1) * nbytes / (gbit_per_s * 125e6)
                    if comm / (compute_s + comm) > max_waiting:
                        return n
                    n += 1""")),
        ("one too many: the first N past the share", _src("""
            def largest_cluster(compute_s, nbytes, gbit_per_s, latency_s, max_waiting):
                n = 1
                while True:
                    n += 1
                    comm = 2 * (n - 1) * latency_s + 2 * (n - 1) / n * nbytes / (gbit_per_s * 125e6)
                    if comm / (compute_s + comm) > max_waiting or n > 10**6:
                        return n if n <= 10**6 else float("inf")""")),
        ("tries at most 1024 workers", _src("""
            def largest_cluster(compute_s, nbytes, gbit_per_s, latency_s, max_waiting):
                best = 1
                for n in range(2, 1025):
                    comm = 2 * (n - 1) * latency_s + 2 * (n - 1) / n * nbytes / (gbit_per_s * 125e6)
                    if comm / (compute_s + comm) <= max_waiting:
                        best = n
                return best""")),
        ("the waiting share taken against the compute time", _src("""
            def largest_cluster(compute_s, nbytes, gbit_per_s, latency_s, max_waiting):
                good, bad = 1, 2
                comm = lambda n: 2 * (n - 1) * latency_s + 2 * (n - 1) / n * nbytes / (gbit_per_s * 125e6)
                if latency_s == 0 and 2 * nbytes / (gbit_per_s * 125e6) <= max_waiting * compute_s:
                    return float("inf")
                while comm(bad) <= max_waiting * compute_s:
                    good, bad = bad, 2 * bad
                while bad - good > 1:
                    mid = (good + bad) // 2
                    good, bad = (mid, bad) if comm(mid) <= max_waiting * compute_s else (good, mid)
                return good""")),
    ],
    # --- 02: compression ---------------------------------------------------------------------
    "02.1": [
        ("counts entries, not bytes", _src("""
            def compression_ratio(grad, parts):
                return grad.size / sum(p.size if isinstance(p, np.ndarray) else len(p) for p in parts)""")),
        ("forgets the bytes objects", _src("""
            def compression_ratio(grad, parts):
                return grad.nbytes / sum(p.nbytes for p in parts if isinstance(p, np.ndarray))""")),
        ("upside down", _src("""
            def compression_ratio(grad, parts):
                return sum(p.nbytes if isinstance(p, np.ndarray) else len(p) for p in parts) / grad.nbytes""")),
        ("assumes an fp32 gradient", _src("""
            def compression_ratio(grad, parts):
                return 4 * grad.size / sum(p.nbytes if isinstance(p, np.ndarray) else len(p) for p in parts)""")),
    ],
    "02.2": [
        ("the absolute error", _src("""
            def relative_error(grad, approx):
                return float(np.linalg.norm(np.asarray(grad, np.float64) - np.asarray(approx, np.float64)))""")),
        ("the largest error of one entry", _src("""
            def relative_error(grad, approx):
                g = np.asarray(grad, np.float64)
                return float(np.abs(g - np.asarray(approx, np.float64)).max() / np.abs(g).max())""")),
        ("squared norms", _src("""
            def relative_error(grad, approx):
                g = np.asarray(grad, np.float64)
                return float(np.sum((g - np.asarray(approx, np.float64)) ** 2) / np.sum(g ** 2))""")),
        ("relative to the approximation", _src("""
            def relative_error(grad, approx):
                a = np.asarray(approx, np.float64)
                return float(np.linalg.norm(np.asarray(grad, np.float64) - a) / np.linalg.norm(a))""")),
    ],
    "02.3": [
        ("upside down", _src("""
            def speedup(compute_s, comm_s, ratio, codec_s):
                return (compute_s + codec_s + comm_s / ratio) / (compute_s + comm_s)""")),
        ("coding is free", _src("""
            def speedup(compute_s, comm_s, ratio, codec_s):
                return (compute_s + comm_s) / (compute_s + comm_s / ratio)""")),
        ("the codec shrinks with R too", _src("""
            def speedup(compute_s, comm_s, ratio, codec_s):
                return (compute_s + comm_s) / (compute_s + (codec_s + comm_s) / ratio)""")),
    ],
    "02.4": [
        ("comm / codec", _src("""
            def break_even_ratio(compute_s, comm_s, codec_s):
                return comm_s / codec_s if codec_s > 0 else 1.0""")),
        ("counts the compute as saved time", _src("""
            def break_even_ratio(compute_s, comm_s, codec_s):
                if codec_s >= comm_s:
                    return float("inf")
                return (compute_s + comm_s) / (compute_s + comm_s - codec_s)""")),
        ("no ratio is impossible: only when the codec is slower", _src("""
            def break_even_ratio(compute_s, comm_s, codec_s):
                if codec_s > comm_s:
                    return float("inf")
                return comm_s / (comm_s - codec_s)""")),
    ],
    "02.5": [
        ("the all-gather pays the latency once", _src("""
            def allgather_vs_ring(nbytes, ratio, workers, alpha, bandwidth):
                n, m = workers, float(nbytes)
                t_ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth
                t_gather = alpha + (n - 1) * m / (ratio * bandwidth)
                return t_ring, t_gather, m / (bandwidth * (alpha + 2 * m / (n * bandwidth)))""")),
        ("the break-even is always N / 2", _src("""
            def allgather_vs_ring(nbytes, ratio, workers, alpha, bandwidth):
                n, m = workers, float(nbytes)
                t_ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth
                t_gather = (n - 1) * (alpha + m / (ratio * bandwidth))
                return t_ring, t_gather, n / 2""")),
        ("the ring sends each chunk once", _src("""
            def allgather_vs_ring(nbytes, ratio, workers, alpha, bandwidth):
                n, m = workers, float(nbytes)
                t_ring = (n - 1) * alpha + (n - 1) / n * m / bandwidth
                t_gather = (n - 1) * (alpha + m / (ratio * bandwidth))
                return t_ring, t_gather, m / (bandwidth * (2 * (n - 1) / (n - 1) * alpha / 2 + m / (n * bandwidth)))""")),
    ],
    "02.6": [
        ("the compressed all-reduce's second round forgotten", _src("""
            def best_collective(nbytes, ratio, workers, alpha, bandwidth, codec_s):
                n, m = workers, float(nbytes)
                times = {"allreduce": 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth,
                         "allgather": (n - 1) * (alpha + m / (ratio * bandwidth)) + codec_s,
                         "compressed_allreduce": (n - 1) * (alpha + m / (n * ratio * bandwidth)) + 2 * codec_s}
                name = min(times, key=times.get)
                return name, times[name]""")),
        ("coding is free", _src("""
            def best_collective(nbytes, ratio, workers, alpha, bandwidth, codec_s):
                n, m = workers, float(nbytes)
                times = {"allreduce": 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth,
                         "allgather": (n - 1) * (alpha + m / (ratio * bandwidth)),
                         "compressed_allreduce": 2 * (n - 1) * (alpha + m / (n * ratio * bandwidth))}
                name = min(times, key=times.get)
                return name, times[name]""")),
        ("the compressed all-reduce codes once", _src("""
            def best_collective(nbytes, ratio, workers, alpha, bandwidth, codec_s):
                n, m = workers, float(nbytes)
                times = {"allreduce": 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth,
                         "allgather": (n - 1) * (alpha + m / (ratio * bandwidth)) + codec_s,
                         "compressed_allreduce": 2 * (n - 1) * (alpha + m / (n * ratio * bandwidth)) + codec_s}
                name = min(times, key=times.get)
                return name, times[name]""")),
        ("only dense against all-gather", _src("""
            def best_collective(nbytes, ratio, workers, alpha, bandwidth, codec_s):
                n, m = workers, float(nbytes)
                times = {"allreduce": 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth,
                         "allgather": (n - 1) * (alpha + m / (ratio * bandwidth)) + codec_s}
                name = min(times, key=times.get)
                return name, times[name]""")),
    ],
    # --- 03: Top-K ---------------------------------------------------------------------------
    "03.1": [
        ("the k-th largest signed value", _src("""
            def topk_threshold(x, k):
                flat = np.ravel(x)
                return float(np.sort(flat)[-k])""")),
        ("one place off", _src("""
            def topk_threshold(x, k):
                a = np.sort(np.abs(x).ravel())
                return float(a[-k - 1]) if k < a.size else float(a[0])""")),
        ("the k-th smallest magnitude", _src("""
            def topk_threshold(x, k):
                return float(np.sort(np.abs(x).ravel())[k - 1])""")),
        ("magnitudes, but sorted row by row", _src("""
            def topk_threshold(x, k):
                return float(np.min(np.sort(np.abs(x))[..., -k]))""")),
    ],
    "03.2": [
        ("strictly above the threshold", _src("""
            def topk_sparsify(x, k):
                t = np.sort(np.abs(x).ravel())[-k]
                return np.where(np.abs(x) > t, x, 0).astype(x.dtype)""")),
        ("exactly k entries, ties broken by position", _src("""
            def topk_sparsify(x, k):
                flat = x.ravel()
                keep = np.argsort(-np.abs(flat), kind="stable")[:k]
                out = np.zeros_like(flat)
                out[keep] = flat[keep]
                return out.reshape(x.shape)""")),
        ("returns float64", _src("""
            def topk_sparsify(x, k):
                t = np.sort(np.abs(x).ravel())[-k]
                return np.where(np.abs(x) >= t, x, 0).astype(np.float64)""")),
        ("ranks signed values", _src("""
            def topk_sparsify(x, k):
                t = np.sort(x.ravel())[-k]
                return np.where(x >= t, x, 0).astype(x.dtype)""")),
    ],
    "03.3": [
        ("int64 positions: twice the bytes", _src("""
            def topk_pack(x, k):
                flat = x.ravel()
                t = np.sort(np.abs(flat))[-k]
                idx = np.flatnonzero(np.abs(flat) >= t)
                return idx, flat[idx]""")),
        ("positions in the order of magnitude", _src("""
            def topk_pack(x, k):
                flat = x.ravel()
                idx = np.argsort(-np.abs(flat), kind="stable")
                t = np.abs(flat[idx[k - 1]])
                idx = idx[np.abs(flat[idx]) >= t].astype(np.int32)
                return idx, flat[idx]""")),
        ("the clerk's pack_v1: argpartition's order, int64, exactly k", _src("""
            def topk_pack(x, k):
                flat = x.ravel()
                idx = np.argpartition(np.abs(flat), -k)[-k:]
                return idx, flat[idx]""")),
        ("sorted positions, but exactly k: a tie at the threshold dropped", _src("""
            def topk_pack(x, k):
                flat = x.ravel()
                idx = np.sort(np.argpartition(np.abs(flat), -k)[-k:]).astype(np.int32)
                return idx, flat[idx]""")),
        ("row numbers of a 2-D gradient, not flat positions", _src("""
            def topk_pack(x, k):
                t = np.sort(np.abs(x).ravel())[-k]
                idx = np.nonzero(np.abs(x) >= t)[0].astype(np.int32)
                return idx, x[np.abs(x) >= t]""")),
    ],
    "03.4": [
        ("float64 output", _src("""
            def topk_unpack(indices, values, shape):
                out = np.zeros(int(np.prod(shape)))
                out[indices] = values
                return out.reshape(shape)""")),
        ("forgets the shape", _src("""
            def topk_unpack(indices, values, shape):
                out = np.zeros(int(np.prod(shape)), dtype=values.dtype)
                out[indices] = values
                return out""")),
        ("head office's unpack_v1: positions taken as rows, float64", _src("""
            def topk_unpack(indices, values, shape):
                report = np.zeros(shape)
                report[indices] = values
                return report""")),
        ("the dtype of the positions", _src("""
            def topk_unpack(indices, values, shape):
                out = np.zeros(int(np.prod(shape)), dtype=indices.dtype)
                out[indices] = values
                return out.reshape(shape)""")),
    ],
    "03.5": [
        ("magnitudes instead of squares", _src("""
            def k_for_energy(x, share):
                a = np.sort(np.abs(np.asarray(x, np.float64)).ravel())[::-1]
                c = np.cumsum(a)
                return int(np.searchsorted(c, share * c[-1]) + 1)""")),
        ("one short", _src("""
            def k_for_energy(x, share):
                e = np.sort(np.asarray(x, np.float64).ravel() ** 2)[::-1]
                c = np.cumsum(e)
                return max(1, int(np.searchsorted(c, share * c[-1])))""")),
        ("as if the energy were spread evenly", _src("""
            def k_for_energy(x, share):
                return int(np.ceil(share * np.size(x)))""")),
    ],
    "03.6": [
        ("k entries at random, not scaled: a k/n share of x on average", _src("""
            def randk(x, k, rng):
                keep = rng.choice(x.size, size=k, replace=False)
                out = np.zeros(x.shape)
                out[keep] = x[keep]
                return out""")),
        ("scaled by k/n instead of n/k", _src("""
            def randk(x, k, rng):
                keep = rng.choice(x.size, size=k, replace=False)
                out = np.zeros(x.shape)
                out[keep] = x[keep] * k / x.size
                return out""")),
        ("each entry kept with probability k/n: unbiased, but more than k may travel", _src("""
            def randk(x, k, rng):
                keep = rng.random(x.size) < k / x.size
                return np.where(keep, x * x.size / k, 0.0)""")),
        ("Top-K scaled by n/k: no randomness, so its bias never averages out", _src("""
            def randk(x, k, rng):
                t = np.sort(np.abs(x))[-k]
                return np.where(np.abs(x) >= t, x * x.size / k, 0.0)""")),
        ("positions drawn with replacement: fewer than k distinct, too rarely kept", _src("""
            def randk(x, k, rng):
                keep = rng.integers(0, x.size, size=k)
                out = np.zeros(x.shape)
                out[keep] = x[keep] * x.size / k
                return out""")),
    ],
    # --- 04: error feedback ------------------------------------------------------------------
    "04.1": [
        ("the new ledger forgets old debts", _src("""
            def ef_step(grad, residual, k):
                total = grad + residual
                t = np.sort(np.abs(total).ravel())[-k]
                sent = np.where(np.abs(total) >= t, total, 0).astype(total.dtype)
                return sent, grad - sent""")),
        ("Top-K of today's gradient alone", _src("""
            def ef_step(grad, residual, k):
                t = np.sort(np.abs(grad).ravel())[-k]
                sent = np.where(np.abs(grad) >= t, grad, 0).astype(grad.dtype)
                return sent, residual + grad - sent""")),
        ("strictly above the threshold", _src("""
            def ef_step(grad, residual, k):
                total = grad + residual
                t = np.sort(np.abs(total).ravel())[-k]
                sent = np.where(np.abs(total) > t, total, 0).astype(total.dtype)
                return sent, total - sent""")),
        ("works in float64", _src("""
            def ef_step(grad, residual, k):
                total = np.asarray(grad, np.float64) + residual
                t = np.sort(np.abs(total).ravel())[-k]
                sent = np.where(np.abs(total) >= t, total, 0.0)
                return sent, total - sent""")),
    ],
    "04.2": [
        ("a fresh ledger every day", _src("""
            def ef_run(grads, k):
                total_sent = np.zeros(grads.shape[1:])
                last = np.zeros(grads.shape[1:])
                for g in grads:
                    sent, last = ef_step(g, np.zeros_like(g), k)
                    total_sent += sent
                return total_sent, last""")),
        ("adds the ledger to what was sent", _src("""
            def ef_run(grads, k):
                residual = np.zeros(grads.shape[1:])
                total_sent = np.zeros_like(residual)
                for g in grads:
                    sent, residual = ef_step(g, residual, k)
                    total_sent += sent
                return total_sent + residual, residual""")),
        ("the ledger is never fed back", _src("""
            def ef_run(grads, k):
                residual = np.zeros(grads.shape[1:])
                total_sent = np.zeros_like(residual)
                for g in grads:
                    sent, owed = ef_step(g, np.zeros_like(g), k)
                    residual += owed
                    total_sent += sent
                return total_sent, residual""")),
    ],
    "04.3": [
        ("always keeps the ledger", _src("""
            def train_quadratic(target, k, lr, steps, feedback):
                w, r = np.zeros(target.shape), np.zeros(target.shape)
                for _ in range(steps):
                    total = (w - target) + r
                    t = np.sort(np.abs(total))[-k]
                    sent = np.where(np.abs(total) >= t, total, 0.0)
                    r = total - sent
                    w -= lr * sent
                return w""")),
        ("the ledger keeps gradients, not what was left", _src("""
            def train_quadratic(target, k, lr, steps, feedback):
                w, r = np.zeros(target.shape), np.zeros(target.shape)
                for _ in range(steps):
                    total = (w - target) + (r if feedback else 0.0)
                    t = np.sort(np.abs(total))[-k]
                    sent = np.where(np.abs(total) >= t, total, 0.0)
                    r = r + (w - target)
                    w -= lr * sent
                return w""")),
        ("steps uphill", _src("""
            def train_quadratic(target, k, lr, steps, feedback):
                w, r = np.zeros(target.shape), np.zeros(target.shape)
                for _ in range(steps):
                    total = (w - target) + (r if feedback else 0.0)
                    t = np.sort(np.abs(total))[-k]
                    sent = np.where(np.abs(total) >= t, total, 0.0)
                    r = total - sent
                    w += lr * sent
                return w""")),
    ],
    "04.4": [
        ("the buggy loop itself", _src("""
            def ef_train(targets, k, lr, steps):
                workers, n = targets.shape
                w, ledger = np.zeros(n), np.zeros(n)
                for _ in range(steps):
                    sent_sum = np.zeros(n)
                    for i in range(workers):
                        grad = w - targets[i]
                        total = grad + ledger
                        t = np.partition(np.abs(total), n - k)[n - k]
                        sent = np.where(np.abs(total) >= t, total, 0.0)
                        ledger = grad - sent
                        sent_sum += sent
                    w -= lr * sent_sum
                return w""")),
        ("one ledger per shop, but old debts still dropped and the sum applied", _src("""
            def ef_train(targets, k, lr, steps):
                workers, n = targets.shape
                w, ledgers = np.zeros(n), np.zeros((workers, n))
                for _ in range(steps):
                    sent_sum = np.zeros(n)
                    for i in range(workers):
                        grad = w - targets[i]
                        total = grad + ledgers[i]
                        t = np.partition(np.abs(total), n - k)[n - k]
                        sent = np.where(np.abs(total) >= t, total, 0.0)
                        ledgers[i] = grad - sent
                        sent_sum += sent
                    w -= lr * sent_sum
                return w""")),
        ("ledgers fixed, but the sum applied instead of the average", _src("""
            def ef_train(targets, k, lr, steps):
                workers, n = targets.shape
                w, ledgers = np.zeros(n), np.zeros((workers, n))
                for _ in range(steps):
                    sent_sum = np.zeros(n)
                    for i in range(workers):
                        total = (w - targets[i]) + ledgers[i]
                        t = np.partition(np.abs(total), n - k)[n - k]
                        sent = np.where(np.abs(total) >= t, total, 0.0)
                        ledgers[i] = total - sent
                        sent_sum += sent
                    w -= lr * sent_sum
                return w""")),
        ("the average, but still one ledger for every shop", _src("""
            def ef_train(targets, k, lr, steps):
                workers, n = targets.shape
                w, ledger = np.zeros(n), np.zeros(n)
                for _ in range(steps):
                    sent_sum = np.zeros(n)
                    for i in range(workers):
                        total = (w - targets[i]) + ledger
                        t = np.partition(np.abs(total), n - k)[n - k]
                        sent = np.where(np.abs(total) >= t, total, 0.0)
                        ledger = total - sent
                        sent_sum += sent
                    w -= lr * sent_sum / workers
                return w""")),
    ],
    "04.5": [
        ("no momentum factor masking", _src("""
            def dgc_step(w, grads, velocity, ledger, k, lr, momentum):
                velocity = momentum * velocity + grads
                ledger = ledger + velocity
                sent = np.zeros_like(ledger)
                n = ledger.shape[1]
                for i in range(len(ledger)):
                    t = np.partition(np.abs(ledger[i]), n - k)[n - k]
                    keep = np.abs(ledger[i]) >= t
                    sent[i, keep] = ledger[i, keep]
                    ledger[i, keep] = 0.0
                return w - lr * sent.mean(axis=0), velocity, ledger""")),
        ("no momentum correction: gradients into the ledger, momentum on the workers' velocities", _src("""
            def dgc_step(w, grads, velocity, ledger, k, lr, momentum):
                ledger = ledger + grads
                velocity = momentum * velocity + grads
                sent = np.zeros_like(ledger)
                n = ledger.shape[1]
                for i in range(len(ledger)):
                    t = np.partition(np.abs(ledger[i]), n - k)[n - k]
                    keep = np.abs(ledger[i]) >= t
                    sent[i, keep] = ledger[i, keep]
                    ledger[i, keep] = 0.0
                    velocity[i, keep] = 0.0
                return w - lr * sent.mean(axis=0), velocity, ledger""")),
        ("masks the velocity but leaves the sent entries in the ledger", _src("""
            def dgc_step(w, grads, velocity, ledger, k, lr, momentum):
                velocity = momentum * velocity + grads
                ledger = ledger + velocity
                sent = np.zeros_like(ledger)
                n = ledger.shape[1]
                for i in range(len(ledger)):
                    t = np.partition(np.abs(ledger[i]), n - k)[n - k]
                    keep = np.abs(ledger[i]) >= t
                    sent[i, keep] = ledger[i, keep]
                    velocity[i, keep] = 0.0
                return w - lr * sent.mean(axis=0), velocity, ledger""")),
        ("the sum of the workers' packets", _src("""
            def dgc_step(w, grads, velocity, ledger, k, lr, momentum):
                velocity = momentum * velocity + grads
                ledger = ledger + velocity
                sent = np.zeros_like(ledger)
                n = ledger.shape[1]
                for i in range(len(ledger)):
                    t = np.partition(np.abs(ledger[i]), n - k)[n - k]
                    keep = np.abs(ledger[i]) >= t
                    sent[i, keep] = ledger[i, keep]
                    ledger[i, keep] = 0.0
                    velocity[i, keep] = 0.0
                return w - lr * sent.sum(axis=0), velocity, ledger""")),
    ],
    "04.6": [
        ("each estimate replaced by its packet, not increased by it", _src("""
            def ef21_train(targets, k, lr, steps):
                shops, n = targets.shape
                w, est, g = np.zeros(n), np.zeros((shops, n)), np.zeros(n)
                for _ in range(steps):
                    change = (w - targets) - est
                    kth = -np.sort(-np.abs(change), axis=1)[:, k - 1:k]
                    packets = np.where(np.abs(change) >= kth, change, 0.0)
                    est = packets
                    g = est.mean(axis=0)
                    w = w - lr * g
                return w, est""")),
        ("the packet is the Top-K of the gradient, not of its distance from the estimate", _src("""
            def ef21_train(targets, k, lr, steps):
                shops, n = targets.shape
                w, est, g = np.zeros(n), np.zeros((shops, n)), np.zeros(n)
                for _ in range(steps):
                    grads = w - targets
                    kth = -np.sort(-np.abs(grads), axis=1)[:, k - 1:k]
                    packets = np.where(np.abs(grads) >= kth, grads, 0.0)
                    est = est + packets
                    g = g + packets.mean(axis=0)
                    w = w - lr * g
                return w, est""")),
        ("head office steps with the average packet, not with its estimate g", _src("""
            def ef21_train(targets, k, lr, steps):
                shops, n = targets.shape
                w, est = np.zeros(n), np.zeros((shops, n))
                for _ in range(steps):
                    change = (w - targets) - est
                    kth = -np.sort(-np.abs(change), axis=1)[:, k - 1:k]
                    packets = np.where(np.abs(change) >= kth, change, 0.0)
                    est = est + packets
                    w = w - lr * packets.mean(axis=0)
                return w, est""")),
        ("the recipe moves before the packets reach head office", _src("""
            def ef21_train(targets, k, lr, steps):
                shops, n = targets.shape
                w, est, g = np.zeros(n), np.zeros((shops, n)), np.zeros(n)
                for _ in range(steps):
                    w = w - lr * g
                    change = (w - targets) - est
                    kth = -np.sort(-np.abs(change), axis=1)[:, k - 1:k]
                    packets = np.where(np.abs(change) >= kth, change, 0.0)
                    est = est + packets
                    g = g + packets.mean(axis=0)
                return w, est""")),
        ("head office adds up the packets instead of averaging them", _src("""
            def ef21_train(targets, k, lr, steps):
                shops, n = targets.shape
                w, est, g = np.zeros(n), np.zeros((shops, n)), np.zeros(n)
                for _ in range(steps):
                    change = (w - targets) - est
                    kth = -np.sort(-np.abs(change), axis=1)[:, k - 1:k]
                    packets = np.where(np.abs(change) >= kth, change, 0.0)
                    est = est + packets
                    g = g + packets.sum(axis=0)
                    w = w - lr * g
                return w, est""")),
    ],
    # --- 05: quantization --------------------------------------------------------------------
    "05.1": [
        ("the clerk's blockwise_v1: signed max, no clamp, 0 / 0", _src("""
            def absmax_quantize(x, bits, chunk=None):
                levels = 2 ** (bits - 1) - 1
                flat = x.ravel()
                chunk = flat.size if chunk is None else chunk
                codes = np.zeros(flat.size, dtype=np.int8)
                scales = np.zeros(-(-flat.size // chunk), dtype=np.float32)
                with np.errstate(all="ignore"):
                    for j, start in enumerate(range(0, flat.size, chunk)):
                        block = flat[start:start + chunk]
                        scales[j] = block.max() / levels
                        codes[start:start + chunk] = np.round(block / scales[j])
                return codes.reshape(x.shape), scales""")),
        ("clamped, and zeros handled, but the scale from the signed max", _src("""
            def absmax_quantize(x, bits, chunk=None):
                levels = 2 ** (bits - 1) - 1
                flat = np.asarray(x).ravel()
                size = flat.size if chunk is None else min(chunk, flat.size)
                scales = np.array([flat[s:s + size].max() / levels for s in range(0, flat.size, size)],
                                  dtype=np.float32)
                steps = np.repeat(scales.astype(np.float64), size)[:flat.size]
                codes = np.clip(np.round(flat / np.where(steps != 0, steps, 1.0)), -levels, levels)
                return codes.astype(np.int8).reshape(np.shape(x)), scales""")),
        ("one scale for the whole tensor, whatever the chunk", _src("""
            def absmax_quantize(x, bits, chunk=None):
                levels = 2 ** (bits - 1) - 1
                flat = np.asarray(x).ravel()
                scale = np.float32(np.abs(flat).max() / levels)
                size = flat.size if chunk is None else min(chunk, flat.size)
                scales = np.full(-(-flat.size // size), scale, dtype=np.float32)
                codes = np.clip(np.round(flat / scale), -levels, levels) if scale > 0 else np.zeros(flat.size)
                return codes.astype(np.int8).reshape(np.shape(x)), scales""")),
        ("unsigned levels: 2^bits - 1", _src("""
            def absmax_quantize(x, bits, chunk=None):
                levels = 2 ** bits - 1
                flat = np.asarray(x).ravel()
                size = flat.size if chunk is None else min(chunk, flat.size)
                scales = np.array([np.abs(flat[s:s + size]).max() / levels for s in range(0, flat.size, size)],
                                  dtype=np.float32)
                steps = np.repeat(scales.astype(np.float64), size)[:flat.size]
                codes = np.clip(np.round(flat / np.where(steps > 0, steps, 1.0)), -127, 127)
                return codes.astype(np.int8).reshape(np.shape(x)), scales""")),
        ("float64 scales: twice the bytes of each", _src("""
            def absmax_quantize(x, bits, chunk=None):
                levels = 2 ** (bits - 1) - 1
                flat = np.asarray(x).ravel()
                size = flat.size if chunk is None else min(chunk, flat.size)
                scales = np.array([np.abs(flat[s:s + size]).max() / levels for s in range(0, flat.size, size)])
                steps = np.repeat(scales, size)[:flat.size]
                codes = np.clip(np.round(flat / np.where(steps > 0, steps, 1.0)), -levels, levels)
                return codes.astype(np.int8).reshape(np.shape(x)), scales""")),
    ],
    "05.2": [
        ("the scales' bytes forgotten: the smallest chunk always wins", _src("""
            def best_chunk(x, bits, chunks, max_error):
                n, best = x.size, None
                for chunk in chunks:
                    codes, scales = absmax_quantize(x, bits, chunk)
                    dec = codes.ravel() * np.repeat(scales.astype(np.float64), min(chunk, n))[:n]
                    error = np.linalg.norm(dec - x.ravel()) / np.linalg.norm(x.astype(np.float64))
                    nbytes = -(-n * bits // 8)
                    if error <= max_error and (best is None or nbytes < best[1]):
                        best = (chunk, nbytes)
                return best""")),
        ("the smallest error, not the fewest bytes", _src("""
            def best_chunk(x, bits, chunks, max_error):
                n, best = x.size, None
                for chunk in chunks:
                    codes, scales = absmax_quantize(x, bits, chunk)
                    dec = codes.ravel() * np.repeat(scales.astype(np.float64), min(chunk, n))[:n]
                    error = np.linalg.norm(dec - x.ravel()) / np.linalg.norm(x.astype(np.float64))
                    nbytes = -(-n * bits // 8) + 4 * scales.size
                    if best is None or error < best[2]:
                        best = (chunk, nbytes, error)
                return best[:2]""")),
        ("the worst entry's error against the largest magnitude", _src("""
            def best_chunk(x, bits, chunks, max_error):
                n, best = x.size, None
                for chunk in chunks:
                    codes, scales = absmax_quantize(x, bits, chunk)
                    dec = codes.ravel() * np.repeat(scales.astype(np.float64), min(chunk, n))[:n]
                    error = np.abs(dec - x.ravel()).max() / np.abs(x).max()
                    nbytes = -(-n * bits // 8) + 4 * scales.size
                    if error <= max_error and (best is None or nbytes < best[1]):
                        best = (chunk, nbytes)
                return best""")),
        ("every code a whole byte, however few its bits", _src("""
            def best_chunk(x, bits, chunks, max_error):
                n, best = x.size, None
                for chunk in chunks:
                    codes, scales = absmax_quantize(x, bits, chunk)
                    dec = codes.ravel() * np.repeat(scales.astype(np.float64), min(chunk, n))[:n]
                    error = np.linalg.norm(dec - x.ravel()) / np.linalg.norm(x.astype(np.float64))
                    nbytes = n + 4 * scales.size
                    if error <= max_error and (best is None or nbytes < best[1]):
                        best = (chunk, nbytes)
                return best""")),
    ],
    "05.3": [
        ("the standard deviation of one night, not of the total", _src("""
            def small_push(delta, scale, nights):
                f = delta / scale - np.floor(delta / scale)
                return nights * scale * float(np.round(delta / scale)), nights * delta, scale * np.sqrt(f * (1 - f))""")),
        ("nearest rounding taken as exact", _src("""
            def small_push(delta, scale, nights):
                f = delta / scale - np.floor(delta / scale)
                return nights * delta, nights * delta, scale * np.sqrt(nights * f * (1 - f))""")),
        ("the worst case, half a step, as if every night were a coin toss", _src("""
            def small_push(delta, scale, nights):
                return nights * scale * float(np.round(delta / scale)), nights * delta, scale / 2 * np.sqrt(nights)""")),
        ("standard deviations added up, not variances", _src("""
            def small_push(delta, scale, nights):
                f = delta / scale - np.floor(delta / scale)
                return nights * scale * float(np.round(delta / scale)), nights * delta, nights * scale * np.sqrt(f * (1 - f))""")),
        ("the fraction of a negative push measured towards zero", _src("""
            def small_push(delta, scale, nights):
                f = delta / scale - np.trunc(delta / scale)
                return (nights * scale * float(np.round(delta / scale)), nights * delta,
                        scale * np.sqrt(abs(nights * f * (1 - f))))""")),
    ],
    "05.4": [
        ("the first code in the high nibble", _src("""
            def pack_int4(codes):
                n = codes.astype(np.uint8) & 0x0F
                if n.size % 2:
                    n = np.append(n, np.uint8(0))
                return ((n[0::2] << 4) | n[1::2]).astype(np.uint8)""")),
        ("offset binary (code + 8) instead of two's complement", _src("""
            def pack_int4(codes):
                n = (codes.astype(np.int16) + 8).astype(np.uint8) & 0x0F
                if n.size % 2:
                    n = np.append(n, np.uint8(0))
                return (n[0::2] | (n[1::2] << 4)).astype(np.uint8)""")),
        ("the clerk's pack_v1: a negative code's high bits spill into its neighbour", _src("""
            def pack_int4(codes):
                c = codes.astype(np.uint8)
                if c.size % 2:
                    c = np.append(c, np.uint8(0))
                return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)""")),
        ("drops the last code of an odd count", _src("""
            def pack_int4(codes):
                n = codes.astype(np.uint8) & 0x0F
                n = n[: n.size - n.size % 2]
                return (n[0::2] | (n[1::2] << 4)).astype(np.uint8)""")),
    ],
    "05.5": [
        ("np.sign: a zero entry is sent as 0", _src("""
            def sign_ef_step(grad, residual):
                p = np.asarray(grad, np.float64) + residual
                sent = np.abs(p).mean() * np.sign(p)
                return sent, p - sent""")),
        ("the largest magnitude as the scale", _src("""
            def sign_ef_step(grad, residual):
                p = np.asarray(grad, np.float64) + residual
                sent = (np.abs(p).max() if p.size else 0.0) * np.where(p < 0, -1.0, 1.0)
                return sent, p - sent""")),
        ("the ledger forgets what it held", _src("""
            def sign_ef_step(grad, residual):
                p = np.asarray(grad, np.float64) + residual
                sent = np.abs(p).mean() * np.where(p < 0, -1.0, 1.0)
                return sent, np.asarray(grad, np.float64) - sent""")),
    ],
    "05.6": [
        ("rounds to the nearest level: biased", _src("""
            def qsgd_encode(x, s, u):
                norm = float(np.linalg.norm(x))
                if norm == 0:
                    return 0.0, np.zeros(x.shape, np.int8)
                return norm, (np.sign(x) * np.round(s * np.abs(x) / norm)).astype(np.int8)""")),
        ("floors, and ignores u", _src("""
            def qsgd_encode(x, s, u):
                norm = float(np.linalg.norm(x))
                if norm == 0:
                    return 0.0, np.zeros(x.shape, np.int8)
                return norm, (np.sign(x) * np.floor(s * np.abs(x) / norm)).astype(np.int8)""")),
        ("rounds up with the wrong probability (1 - fraction)", _src("""
            def qsgd_encode(x, s, u):
                norm = float(np.linalg.norm(x))
                if norm == 0:
                    return 0.0, np.zeros(x.shape, np.int8)
                y = s * np.abs(x) / norm
                low = np.floor(y)
                return norm, (np.sign(x) * (low + (u < 1 - (y - low)))).astype(np.int8)""")),
        ("unbiased but all or nothing: 0 or +-s", _src("""
            def qsgd_encode(x, s, u):
                norm = float(np.linalg.norm(x))
                if norm == 0:
                    return 0.0, np.zeros(x.shape, np.int8)
                return norm, (np.sign(x) * s * (u < np.abs(x) / norm)).astype(np.int8)""")),
        ("scales by the largest entry, not the 2-norm", _src("""
            def qsgd_encode(x, s, u):
                top = float(np.abs(x).max()) if x.size else 0.0
                if top == 0:
                    return 0.0, np.zeros(x.shape, np.int8)
                return top, (np.sign(x) * np.floor(s * np.abs(x) / top + u)).astype(np.int8)""")),
    ],
    "05.7": [
        ("32x per step and no warm-up", _src("""
            def onebit_adam_traffic(n_params, workers, steps, warmup):
                return 32.0, 32.0""")),
        ("the headline ratio for the whole run too", _src("""
            def onebit_adam_traffic(n_params, workers, steps, warmup):
                base, extra = divmod(n_params, workers)
                chunks = [base + 1] * extra + [base] * (workers - extra)
                r = 4 * n_params / sum(-(-c // 8) + 4 for c in chunks)
                return r, r""")),
        ("one scale per packet of the whole gradient", _src("""
            def onebit_adam_traffic(n_params, workers, steps, warmup):
                dense = 4 * n_params
                compressed = -(-n_params // 8) + 4
                return dense / compressed, steps * dense / (warmup * dense + (steps - warmup) * compressed)""")),
        ("all-gathers the 1-bit packets", _src("""
            def onebit_adam_traffic(n_params, workers, steps, warmup):
                dense = 2 * (workers - 1) * 4 * n_params
                compressed = workers * (workers - 1) * (-(-n_params // 8) + 4)
                return dense / compressed, steps * dense / (warmup * dense + (steps - warmup) * compressed)""")),
    ],
    # --- 06: engineering ---------------------------------------------------------------------
    "06.1": [
        ("the gap counts the index itself", _src("""
            def delta_encode(indices):
                out, prev = bytearray(), 0
                for i in np.asarray(indices, np.int64).tolist():
                    gap = i - prev
                    prev = i
                    out += bytes([255]) * (gap // 255)
                    out.append(gap % 255)
                return np.frombuffer(bytes(out), np.uint8).copy()""")),
        ("no escapes: the gap wraps around", _src("""
            def delta_encode(indices):
                idx = np.asarray(indices, np.int64)
                gaps = np.diff(np.r_[-1, idx]) - 1
                return (gaps % 256).astype(np.uint8)""")),
        ("one escape byte, whatever the gap", _src("""
            def delta_encode(indices):
                out, prev = bytearray(), -1
                for i in np.asarray(indices, np.int64).tolist():
                    gap = i - prev - 1
                    prev = i
                    if gap >= 255:
                        out.append(255)
                    out.append(gap % 255)
                return np.frombuffer(bytes(out), np.uint8).copy()""")),
    ],
    "06.2": [
        ("255 read as an ordinary gap", _src("""
            def delta_decode(data):
                return np.cumsum(np.asarray(data, np.int64) + 1) - 1""")),
        ("forgets the +1 between neighbours", _src("""
            def delta_decode(data):
                out, prev, gap = [], -1, 0
                for b in np.asarray(data, np.uint8).tolist():
                    gap += b
                    if b != 255:
                        prev += gap
                        out.append(prev)
                        gap = 0
                return np.array(out, np.int64)""")),
        ("starts counting at 0, not -1", _src("""
            def delta_decode(data):
                out, prev, gap = [], 0, 0
                for b in np.asarray(data, np.uint8).tolist():
                    gap += b
                    if b != 255:
                        prev += gap + 1
                        out.append(prev)
                        gap = 0
                return np.array(out, np.int64)""")),
    ],
    "06.3": [
        ("a send starts when its bucket is ready, even if the line is busy", _src("""
            def overlap_timeline(backward_s, comm_s):
                ready = np.cumsum(backward_s)
                return np.stack([ready, ready + np.asarray(comm_s)], axis=1)""")),
        ("a send starts when the line is free, ready or not", _src("""
            def overlap_timeline(backward_s, comm_s):
                end = np.cumsum(comm_s)
                return np.stack([end - np.asarray(comm_s), end], axis=1)""")),
        ("ready after its own backward time only", _src("""
            def overlap_timeline(backward_s, comm_s):
                times, free = np.zeros((len(comm_s), 2)), 0.0
                for i, (b, c) in enumerate(zip(backward_s, comm_s)):
                    start = max(b, free)
                    free = start + c
                    times[i] = start, free
                return times""")),
    ],
    "06.4": [
        ("overlapped: the longer of backward and communication", _src("""
            def step_time(forward_s, backward_s, comm_s, overlap):
                if overlap:
                    return forward_s + max(float(np.sum(backward_s)), float(np.sum(comm_s)))
                return forward_s + float(np.sum(backward_s)) + float(np.sum(comm_s))""")),
        ("overlapped: only the last send is left after backward", _src("""
            def step_time(forward_s, backward_s, comm_s, overlap):
                if overlap:
                    return forward_s + float(np.sum(backward_s)) + float(comm_s[-1])
                return forward_s + float(np.sum(backward_s)) + float(np.sum(comm_s))""")),
        ("in series without the forward pass", _src("""
            def step_time(forward_s, backward_s, comm_s, overlap):
                if overlap:
                    return forward_s + float(overlap_timeline(np.asarray(backward_s), np.asarray(comm_s))[-1, 1])
                return float(np.sum(backward_s)) + float(np.sum(comm_s))""")),
    ],
    "06.5": [
        ("no_sync changes nothing", _src("""
            def accumulation_cost(compute_s, comm_s, grad_bytes, micro_batch, accumulate, no_sync):
                samples = micro_batch * accumulate
                return (accumulate * (compute_s + comm_s)) / samples, accumulate * grad_bytes / samples""")),
        ("per micro-batch, not per sample", _src("""
            def accumulation_cost(compute_s, comm_s, grad_bytes, micro_batch, accumulate, no_sync):
                ex = 1 if no_sync else accumulate
                return (accumulate * compute_s + ex * comm_s) / accumulate, ex * grad_bytes / accumulate""")),
        ("no_sync skips the exchange altogether", _src("""
            def accumulation_cost(compute_s, comm_s, grad_bytes, micro_batch, accumulate, no_sync):
                ex = 0 if no_sync else accumulate
                samples = micro_batch * accumulate
                return (accumulate * compute_s + ex * comm_s) / samples, ex * grad_bytes / samples""")),
    ],
    "06.6": [
        ("no orthonormalisation", _src("""
            def power_step(m, q):
                p = m @ q
                return p @ (m.T @ p).T""")),
        ("q_new from the raw p, then the orthonormal p", _src("""
            def power_step(m, q):
                raw = m @ q
                p, _ = np.linalg.qr(raw)
                return p @ (m.T @ raw).T""")),
        ("rebuilt with the old q", _src("""
            def power_step(m, q):
                p, _ = np.linalg.qr(m @ q)
                return p @ q.T""")),
    ],
    "06.7": [
        ("sends float32", _src("""
            def fp16_hook(state, bucket):
                fut = state.allreduce(bucket.buffer() / state.world_size)
                return fut.then(lambda f: f.value()[0])""", TORCH)),
        ("divides after the sum: fp16 overflows", _src("""
            def fp16_hook(state, bucket):
                fut = state.allreduce(bucket.buffer().to(torch.float16))
                return fut.then(lambda f: f.value()[0].float() / state.world_size)""", TORCH)),
        ("never calls the all-reduce", _src("""
            def fp16_hook(state, bucket):
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer().half().float())
                return fut""", TORCH)),
        ("hands back float16", _src("""
            def fp16_hook(state, bucket):
                half = bucket.buffer().to(torch.float16) / state.world_size
                return state.allreduce(half).then(lambda f: f.value()[0])""", TORCH)),
        ("returns the tensor, not a future", _src("""
            def fp16_hook(state, bucket):
                half = bucket.buffer().to(torch.float16) / state.world_size
                return state.allreduce(half).wait()[0].float()""", TORCH)),
    ],
    "06.8": [
        ("closes a bucket before it would pass the cap", _src("""
            def best_bucket_cap(sizes, backward_s, alpha, beta, caps):
                ready = np.cumsum(backward_s)
                best = None
                for cap in sorted(caps):
                    free, filled = 0.0, 0.0
                    for i, size in enumerate(sizes):
                        if filled > 0 and filled + size > cap:
                            free = max(free, ready[i - 1]) + alpha + beta * filled
                            filled = 0.0
                        filled += size
                    free = max(free, ready[-1]) + alpha + beta * filled
                    if best is None or free < best[1]:
                        best = (cap, free)
                return best[0], float(best[1])""")),
        ("no overlap: only counts the messages", _src("""
            def best_bucket_cap(sizes, backward_s, alpha, beta, caps):
                best = None
                for cap in sorted(caps):
                    count, filled = 0, 0.0
                    for i, size in enumerate(sizes):
                        filled += size
                        if filled >= cap or i == len(sizes) - 1:
                            count, filled = count + 1, 0.0
                    t = float(np.sum(backward_s)) + count * alpha + beta * float(np.sum(sizes))
                    if best is None or t < best[1]:
                        best = (cap, t)
                return best[0], best[1]""")),
        ("a tie goes to the largest cap", _src("""
            def best_bucket_cap(sizes, backward_s, alpha, beta, caps):
                ready = np.cumsum(backward_s)
                best = None
                for cap in sorted(caps):
                    free, filled = 0.0, 0.0
                    for i, size in enumerate(sizes):
                        filled += size
                        if filled >= cap or i == len(sizes) - 1:
                            free = max(free, ready[i]) + alpha + beta * filled
                            filled = 0.0
                    if best is None or free <= best[1]:
                        best = (cap, free)
                return best[0], float(best[1])""")),
        ("a bucket is ready when its first tensor is", _src("""
            def best_bucket_cap(sizes, backward_s, alpha, beta, caps):
                ready = np.cumsum(backward_s)
                best = None
                for cap in sorted(caps):
                    free, filled, first = 0.0, 0.0, None
                    for i, size in enumerate(sizes):
                        first = i if first is None else first
                        filled += size
                        if filled >= cap or i == len(sizes) - 1:
                            free = max(free, ready[first]) + alpha + beta * filled
                            filled, first = 0.0, None
                    if best is None or free < best[1]:
                        best = (cap, free)
                return best[0], float(best[1])""")),
    ],
    # --- 08: local steps -------------------------------------------------------------------------
    "08.1": [
        ("two workers at theta + d and theta - d: their average is theta", _src("""
            def check_outer_step(outer_step):
                theta, d = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
                workers = np.stack([theta + d, theta - d])
                got = outer_step(theta, workers, 1.0, 0.0)
                avg = workers.mean(axis=0)
                if np.allclose(got, avg):
                    return "right"
                return "reversed" if np.allclose(got, 2 * theta - avg) else "wrong"
            """)),
        ("a single worker: a sum is its mean", _src("""
            def check_outer_step(outer_step):
                theta, workers = np.array([1.0, 2.0, 3.0]), np.array([[0.0, 3.0, 1.0]])
                got = outer_step(theta, workers, 1.0, 0.0)
                if np.allclose(got, workers[0]):
                    return "right"
                return "reversed" if np.allclose(got, 2 * theta - workers[0]) else "wrong"
            """)),
        ("only the direction: towards the workers or away", _src("""
            def check_outer_step(outer_step):
                theta = np.array([1.0, -2.0, 0.5])
                workers = np.array([[0.0, -1.0, 2.0], [3.0, -4.0, 0.5], [1.5, 0.5, -1.0]])
                move = outer_step(theta, workers, 1.0, 0.0) - theta
                return "right" if move @ (workers.mean(axis=0) - theta) > 0 else "reversed"
            """)),
        ("DiLoCo's lr 0.7 and momentum 0.9, compared with the average", _src("""
            def check_outer_step(outer_step):
                theta = np.array([1.0, -2.0, 0.5])
                workers = np.array([[0.0, -1.0, 2.0], [3.0, -4.0, 0.5], [1.5, 0.5, -1.0]])
                got, avg = outer_step(theta, workers, 0.7, 0.9), workers.mean(axis=0)
                if np.allclose(got, avg):
                    return "right"
                return "reversed" if np.allclose(got, 2 * theta - avg) else "wrong"
            """)),
        ("exact equality: a float32 step is never equal", _src("""
            def check_outer_step(outer_step):
                theta = np.array([1.0, -2.0, 0.5])
                workers = np.array([[0.0, -1.0, 2.0], [3.0, -4.1, 0.5], [1.5, 0.5, -1.3]])
                got, avg = outer_step(theta, workers, 1.0, 0.0), workers.mean(axis=0)
                if np.array_equal(got, avg):
                    return "right"
                return "reversed" if np.array_equal(got, 2 * theta - avg) else "wrong"
            """)),
        ("a one-parameter model: a mean over every entry is the mean over workers", _src("""
            def check_outer_step(outer_step):
                theta, workers = np.array([1.0]), np.array([[0.0], [3.0], [-1.5]])
                got, avg = outer_step(theta, workers, 1.0, 0.0), workers.mean(axis=0)
                if np.allclose(got, avg):
                    return "right"
                return "reversed" if np.allclose(got, 2 * theta - avg) else "wrong"
            """)),
    ],
    "08.2": [
        ("one step short: H rounded down", _src("""
            def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
                t = 2 * (workers - 1) * (latency_s + params * bits / 8 / workers / (gbit_per_s * 125e6))
                return max(1, int(share * t / ((1 - share) * compute_s)))""")),
        ("gigabits read as gigabytes", _src("""
            def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
                t = 2 * (workers - 1) * (latency_s + params * bits / 8 / workers / (gbit_per_s * 1e9))
                return max(1, int(np.ceil(share * t / ((1 - share) * compute_s))))""")),
        ("the exchange against the compute, not against the whole time", _src("""
            def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
                t = 2 * (workers - 1) * (latency_s + params * bits / 8 / workers / (gbit_per_s * 125e6))
                return max(1, int(np.ceil(t / ((1 - share) * compute_s))))""")),
        ("the latency forgotten", _src("""
            def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
                t = 2 * (workers - 1) * params * bits / 8 / workers / (gbit_per_s * 125e6)
                return max(1, int(np.ceil(share * t / ((1 - share) * compute_s))))""")),
        ("the whole report in every message of the ring", _src("""
            def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
                t = 2 * (workers - 1) * (latency_s + params * bits / 8 / (gbit_per_s * 125e6))
                return max(1, int(np.ceil(share * t / ((1 - share) * compute_s))))""")),
    ],
    "08.3": [
        ("the buggy loop as given", _src("""
            def sparseloco_train(targets, k, inner_steps, lr, rounds):
                shops, n = targets.shape
                theta, local, ledgers = np.zeros(n), np.zeros((shops, n)), np.zeros((shops, n))
                for _ in range(rounds):
                    for _ in range(inner_steps):
                        local = local - lr * (local - targets)
                    delta = theta - local
                    kth = -np.sort(-np.abs(delta), axis=1)[:, k - 1:k]
                    sent = np.where(np.abs(delta) >= kth, delta, 0.0)
                    ledgers = ledgers + (delta - sent)
                    theta = theta - sent.mean(axis=0)
                return theta""")),
        ("the ledger fixed, but the shops never restart from head office", _src("""
            def sparseloco_train(targets, k, inner_steps, lr, rounds):
                shops, n = targets.shape
                theta, local, ledgers = np.zeros(n), np.zeros((shops, n)), np.zeros((shops, n))
                for _ in range(rounds):
                    for _ in range(inner_steps):
                        local = local - lr * (local - targets)
                    total = ledgers + (theta - local)
                    kth = -np.sort(-np.abs(total), axis=1)[:, k - 1:k]
                    sent = np.where(np.abs(total) >= kth, total, 0.0)
                    ledgers = total - sent
                    theta = theta - sent.mean(axis=0)
                return theta""")),
        ("the restart fixed, but the ledger never reaches a report", _src("""
            def sparseloco_train(targets, k, inner_steps, lr, rounds):
                shops, n = targets.shape
                theta, ledgers = np.zeros(n), np.zeros((shops, n))
                for _ in range(rounds):
                    local = np.tile(theta, (shops, 1))
                    for _ in range(inner_steps):
                        local = local - lr * (local - targets)
                    delta = theta - local
                    kth = -np.sort(-np.abs(delta), axis=1)[:, k - 1:k]
                    sent = np.where(np.abs(delta) >= kth, delta, 0.0)
                    ledgers = ledgers + (delta - sent)
                    theta = theta - sent.mean(axis=0)
                return theta""")),
        ("one ledger shared by all the shops", _src("""
            def sparseloco_train(targets, k, inner_steps, lr, rounds):
                shops, n = targets.shape
                theta, ledger = np.zeros(n), np.zeros(n)
                for _ in range(rounds):
                    local = np.tile(theta, (shops, 1))
                    for _ in range(inner_steps):
                        local = local - lr * (local - targets)
                    sent = []
                    for d in theta - local:
                        total = ledger + d
                        t = np.partition(np.abs(total), n - k)[n - k]
                        s = np.where(np.abs(total) >= t, total, 0.0)
                        ledger = total - s
                        sent.append(s)
                    theta = theta - np.mean(sent, axis=0)
                return theta""")),
    ],
    "08.4": [
        ("a recovering member's report counted", _src("""
            def quorum_weights(entry, tokens):
                t = np.asarray(tokens, dtype=np.float64)
                w = np.zeros(t.size)
                w[entry["members"]] = t[entry["members"]]
                return w / w.sum()""")),
        ("every group that trained, member or not", _src("""
            def quorum_weights(entry, tokens):
                t = np.asarray(tokens, dtype=np.float64)
                w = t.copy()
                w[entry["recovering"]] = 0.0
                return w / w.sum()""")),
        ("members counted equally, tokens ignored", _src("""
            def quorum_weights(entry, tokens):
                w = np.zeros(len(tokens))
                w[entry["members"]] = 1.0
                w[entry["recovering"]] = 0.0
                return w / w.sum()""")),
        ("divided by every group's tokens", _src("""
            def quorum_weights(entry, tokens):
                t = np.asarray(tokens, dtype=np.float64)
                w = np.zeros(t.size)
                w[entry["members"]] = t[entry["members"]]
                w[entry["recovering"]] = 0.0
                return w / t.sum()""")),
    ],
    "08.5": [
        ("behind by every step it missed, not by those since it last took part", _src("""
            def replica_report(log, group):
                missed = [e["step"] for e in log if group not in e["members"]]
                peers = sorted(log[-1]["members"]) if missed else []
                return {"missed": missed, "behind": len(missed), "peers": peers}""")),
        ("peers: only the members that were not recovering", _src("""
            def replica_report(log, group):
                missed = [e["step"] for e in log if group not in e["members"]]
                behind = 0
                for e in reversed(log):
                    if group in e["members"]:
                        break
                    behind += 1
                last = log[-1]
                peers = sorted(g for g in last["members"] if g not in last["recovering"]) if behind else []
                return {"missed": missed, "behind": behind, "peers": peers}""")),
        ("a group that rejoined as recovering counted as still missing", _src("""
            def replica_report(log, group):
                missed = [e["step"] for e in log if group not in e["members"] or group in e["recovering"]]
                behind = 0
                for e in reversed(log):
                    if group in e["members"]:
                        break
                    behind += 1
                return {"missed": missed, "behind": behind, "peers": sorted(log[-1]["members"]) if behind else []}""")),
        ("peers listed even when nothing is needed", _src("""
            def replica_report(log, group):
                missed = [e["step"] for e in log if group not in e["members"]]
                behind = 0
                for e in reversed(log):
                    if group in e["members"]:
                        break
                    behind += 1
                return {"missed": missed, "behind": behind, "peers": [g for g in log[-1]["members"] if g != group]}""")),
    ],
    "08.6": [
        ("every return flagged, recovered or not", _src("""
            def audit_log(log):
                stale, lost, holders = [], [], None
                for e in log:
                    behind = [] if holders is None else [g for g in e["members"] if g not in holders]
                    if holders is not None and len(behind) == len(e["members"]):
                        lost.append(e["step"])
                    stale += [[e["step"], g] for g in behind]
                    holders = set(e["members"])
                return {"stale": stale, "lost": lost}""")),
        ("behind only if never seen before, not if it missed the step before", _src("""
            def audit_log(log):
                stale, lost, seen = [], [], None
                for e in log:
                    behind = [] if seen is None else [g for g in e["members"] if g not in seen]
                    if seen is not None and len(behind) == len(e["members"]):
                        lost.append(e["step"])
                    stale += [[e["step"], g] for g in behind if g not in e["recovering"]]
                    seen = set(e["members"]) | (seen or set())
                return {"stale": stale, "lost": lost}""")),
        ("lost when every member is recovering, not when none holds the state", _src("""
            def audit_log(log):
                stale, lost, holders = [], [], None
                for e in log:
                    behind = [] if holders is None else [g for g in e["members"] if g not in holders]
                    if e["members"] and set(e["members"]) <= set(e["recovering"]):
                        lost.append(e["step"])
                    stale += [[e["step"], g] for g in behind if g not in e["recovering"]]
                    holders = set(e["members"])
                return {"stale": stale, "lost": lost}""")),
        ("a recovering group counted as holding the state before it received it", _src("""
            def audit_log(log):
                stale, lost, holders = [], [], None
                for e in log:
                    behind = [] if holders is None else [g for g in e["members"] if g not in holders]
                    if holders is not None and not [g for g in e["members"] if g in holders or g in e["recovering"]]:
                        lost.append(e["step"])
                    stale += [[e["step"], g] for g in behind if g not in e["recovering"]]
                    holders = set(e["members"])
                return {"stale": stale, "lost": lost}""")),
    ],
    # --- 09: sharding ------------------------------------------------------------------------
    "09.1": [
        ("stage 1 shards the weights first", _src("""
            def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
                for stage in range(4):
                    held = (params * param_bytes / (ranks if stage >= 1 else 1)
                            + params * grad_bytes / (ranks if stage >= 2 else 1)
                            + params * optimizer_bytes / (ranks if stage >= 3 else 1))
                    if held <= memory_bytes:
                        return stage
                return None""")),
        ("the most sharding that fits, not the least", _src("""
            def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
                for stage in (3, 2, 1, 0):
                    held = (params * param_bytes / (ranks if stage >= 3 else 1)
                            + params * grad_bytes / (ranks if stage >= 2 else 1)
                            + params * optimizer_bytes / (ranks if stage >= 1 else 1))
                    if held <= memory_bytes:
                        return stage
                return None""")),
        ("forgets the optimizer state", _src("""
            def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
                for stage in range(4):
                    held = (params * param_bytes / (ranks if stage >= 3 else 1)
                            + params * grad_bytes / (ranks if stage >= 2 else 1))
                    if held <= memory_bytes:
                        return stage
                return None""")),
        ("an exact fit taken as too big", _src("""
            def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
                for stage in range(4):
                    held = (params * param_bytes / (ranks if stage >= 3 else 1)
                            + params * grad_bytes / (ranks if stage >= 2 else 1)
                            + params * optimizer_bytes / (ranks if stage >= 1 else 1))
                    if held < memory_bytes:
                        return stage
                return None""")),
        ("stage 3 when nothing fits", _src("""
            def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
                for stage in range(3):
                    held = (params * param_bytes
                            + params * grad_bytes / (ranks if stage >= 2 else 1)
                            + params * optimizer_bytes / (ranks if stage >= 1 else 1))
                    if held <= memory_bytes:
                        return stage
                return 3""")),
    ],
    "09.2": [
        ("FSDP without the re-gather for backward", _src("""
            def sharded_step_bytes(params, ranks, stage, grad_bytes, weight_bytes, regathered):
                share = (ranks - 1) / ranks
                if stage == 0:
                    return 2 * share * params * grad_bytes
                return share * params * (grad_bytes + weight_bytes)""")),
        ("DDP's all-reduce counted as a reduce-scatter only", _src("""
            def sharded_step_bytes(params, ranks, stage, grad_bytes, weight_bytes, regathered):
                share = (ranks - 1) / ranks
                sent = share * params * grad_bytes
                if stage >= 1:
                    sent += share * params * weight_bytes
                if stage == 3:
                    sent += share * regathered * weight_bytes
                return sent""")),
        ("every layer re-gathered, whatever FSDP keeps", _src("""
            def sharded_step_bytes(params, ranks, stage, grad_bytes, weight_bytes, regathered):
                share = (ranks - 1) / ranks
                if stage == 0:
                    return 2 * share * params * grad_bytes
                return share * params * (grad_bytes + weight_bytes * (2 if stage == 3 else 1))""")),
        ("the all-gathers priced at the gradient's bytes", _src("""
            def sharded_step_bytes(params, ranks, stage, grad_bytes, weight_bytes, regathered):
                share = (ranks - 1) / ranks
                if stage == 0:
                    return 2 * share * params * grad_bytes
                return share * (2 * params + (regathered if stage == 3 else 0)) * grad_bytes""")),
        ("a whole tensor per ring turn", _src("""
            def sharded_step_bytes(params, ranks, stage, grad_bytes, weight_bytes, regathered):
                turns = ranks - 1
                if stage == 0:
                    return 2 * turns * params * grad_bytes
                return turns * (params * grad_bytes + params * weight_bytes + (regathered * weight_bytes if stage == 3 else 0))""")),
    ],
    "09.3": [
        ("the clerk's loop as given", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                size = n // ranks
                codes, scales = np.zeros((ranks, n)), np.zeros((ranks, n))
                for sender in range(ranks):
                    for start in range(0, n, block):
                        part = grads[sender, start:start + block]
                        s = np.abs(part).max() / top
                        scales[sender, start:start + block] = s
                        codes[sender, start:start + block] = np.round(part / s) if s > 0 else 0
                out = np.zeros((ranks, size))
                for dest in range(ranks):
                    mine = slice(dest * size, (dest + 1) * size)
                    out[dest] = codes[:, mine].sum(axis=0) * scales[:, mine].mean(axis=0) / ranks
                return out""")),
        ("decodes before adding, but blocks still cut across the whole gradient", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                decoded = np.zeros((ranks, n))
                for sender in range(ranks):
                    for start in range(0, n, block):
                        part = grads[sender, start:start + block]
                        s = np.abs(part).max() / top
                        decoded[sender, start:start + block] = np.round(part / s) * s if s > 0 else 0
                return decoded.mean(axis=0).reshape(ranks, n // ranks)""")),
        ("blocks per chunk, but the codes added before decoding", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                size = n // ranks
                codes, scales = np.zeros((ranks, n)), np.zeros((ranks, n))
                for sender in range(ranks):
                    for dest in range(ranks):
                        for start in range(dest * size, (dest + 1) * size, block):
                            stop = min(start + block, (dest + 1) * size)
                            part = grads[sender, start:stop]
                            s = np.abs(part).max() / top
                            scales[sender, start:stop] = s
                            codes[sender, start:stop] = np.round(part / s) if s > 0 else 0
                out = np.zeros((ranks, size))
                for dest in range(ranks):
                    mine = slice(dest * size, (dest + 1) * size)
                    out[dest] = codes[:, mine].sum(axis=0) * scales[:, mine].mean(axis=0) / ranks
                return out""")),
        ("summed, not averaged", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                size = n // ranks
                out = np.zeros((ranks, size))
                for sender in range(ranks):
                    for dest in range(ranks):
                        chunk = grads[sender, dest * size:(dest + 1) * size]
                        for start in range(0, size, block):
                            part = chunk[start:start + block]
                            s = np.abs(part).max() / top
                            if s > 0:
                                out[dest, start:start + block] += np.round(part / s) * s
                return out""")),
        ("one scale per chunk, no blocks", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                size = n // ranks
                out = np.zeros((ranks, size))
                for sender in range(ranks):
                    for dest in range(ranks):
                        chunk = grads[sender, dest * size:(dest + 1) * size]
                        s = np.abs(chunk).max() / top
                        if s > 0:
                            out[dest] += np.round(chunk / s) * s
                return out / ranks""")),
        ("its own chunk added unquantized", _src("""
            def qgz_reduce_scatter(grads, bits, block):
                ranks, n = grads.shape
                top = 2 ** (bits - 1) - 1
                size = n // ranks
                out = np.zeros((ranks, size))
                for sender in range(ranks):
                    for dest in range(ranks):
                        chunk = grads[sender, dest * size:(dest + 1) * size]
                        if sender == dest:
                            out[dest] += chunk
                            continue
                        for start in range(0, size, block):
                            part = chunk[start:start + block]
                            s = np.abs(part).max() / top
                            if s > 0:
                                out[dest, start:start + block] += np.round(part / s) * s
                return out / ranks""")),
    ],
    "09.4": [
        ("the worker's ledger holds the whole gradient", _src("""
            import math

            def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
                per = (param_bytes + grad_bytes + optimizer_bytes) / ranks + {None: 0, "worker": 4, "shard": 4 / ranks}[ledger]
                return math.floor(memory_bytes / per)""")),
        ("the ledger in the gradient's dtype", _src("""
            import math

            def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
                lb = grad_bytes
                per = (param_bytes + grad_bytes + optimizer_bytes) / ranks
                per += {None: 0, "worker": lb * (ranks - 1) / ranks, "shard": lb / ranks}[ledger]
                return math.floor(memory_bytes / per)""")),
        ("the shard's ledger unsharded", _src("""
            import math

            def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
                per = (param_bytes + grad_bytes + optimizer_bytes) / ranks
                per += {None: 0, "worker": 4 * (ranks - 1) / ranks, "shard": 4}[ledger]
                return math.floor(memory_bytes / per)""")),
        ("rounded to the nearest, not down", _src("""
            def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
                per = (param_bytes + grad_bytes + optimizer_bytes) / ranks
                per += {None: 0, "worker": 4 * (ranks - 1) / ranks, "shard": 4 / ranks}[ledger]
                return round(memory_bytes / per)""")),
        ("the weights kept whole, as in ZeRO-2", _src("""
            import math

            def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
                per = param_bytes + (grad_bytes + optimizer_bytes) / ranks
                per += {None: 0, "worker": 4 * (ranks - 1) / ranks, "shard": 4 / ranks}[ledger]
                return math.floor(memory_bytes / per)""")),
    ],
    "09.5": [
        ("packets added on the way, as if they were an all-reduce", _src("""
            def slow_link_bytes(params, shards, replicas, grad_bytes, packet_bytes):
                per = grad_bytes if packet_bytes is None else packet_bytes
                return 2 * (replicas - 1) / replicas * params / shards * per""")),
        ("the whole gradient crosses, not the shard", _src("""
            def slow_link_bytes(params, shards, replicas, grad_bytes, packet_bytes):
                if packet_bytes is None:
                    return 2 * (replicas - 1) / replicas * params * grad_bytes
                return (replicas - 1) * params * packet_bytes""")),
        ("the all-gather counts its own packet", _src("""
            def slow_link_bytes(params, shards, replicas, grad_bytes, packet_bytes):
                if packet_bytes is None:
                    return 2 * (replicas - 1) / replicas * params / shards * grad_bytes
                return replicas * params / shards * packet_bytes""")),
        ("the ring counted over the node's ranks, not the replicas", _src("""
            def slow_link_bytes(params, shards, replicas, grad_bytes, packet_bytes):
                if replicas == 1:
                    return 0.0
                if packet_bytes is None:
                    return 2 * (shards - 1) / shards * params / shards * grad_bytes
                return (shards - 1) * params / shards * packet_bytes""")),
        ("the all-reduce counted as half a ring", _src("""
            def slow_link_bytes(params, shards, replicas, grad_bytes, packet_bytes):
                if packet_bytes is None:
                    return (replicas - 1) / replicas * params / shards * grad_bytes
                return (replicas - 1) * params / shards * packet_bytes""")),
    ],
}


RIGHT = {
    # the new tasks, solved another way than the master
    "01.4": _src("""
        def largest_cluster(compute_s, nbytes, gbit_per_s, latency_s, max_waiting):
            # comm(n) <= T with T = compute * w / (1 - w): 2 a n^2 + (2 m - 2 a - T) n - 2 m <= 0, m = M / B
            m, a = nbytes / (gbit_per_s * 125e6), latency_s
            target = compute_s * max_waiting / (1 - max_waiting)
            if a == 0:
                return float("inf") if 2 * m <= target else int(np.floor(2 * m / (2 * m - target)))
            b = 2 * m - 2 * a - target
            n = int(np.floor((-b + np.sqrt(b * b + 16 * a * m)) / (4 * a)))
            return max(n, 1)"""),
    "02.6": _src("""
        def best_collective(nbytes, ratio, workers, alpha, bandwidth, codec_s):
            n, m = workers, nbytes
            names = ["allreduce", "allgather", "compressed_allreduce"]
            times = [2 * (n - 1) * (alpha + m / n / bandwidth),
                     (n - 1) * alpha + (n - 1) * m / ratio / bandwidth + codec_s,
                     2 * (n - 1) * alpha + 2 * (n - 1) * m / n / ratio / bandwidth + 2 * codec_s]
            best = int(np.argmin(times))
            return names[best], float(times[best])"""),
    "03.5": _src("""
        def k_for_energy(x, share):
            squares = sorted((float(v) ** 2 for v in np.ravel(x)), reverse=True)
            total, carried = sum(squares), 0.0
            for k, e in enumerate(squares, 1):
                carried += e
                if carried >= share * total:
                    return k
            return len(squares)"""),
    "03.6": _src("""
        def randk(x, k, rng):
            # importance sampling: a random permutation's first k, each kept value weighted by
            # 1 / (its chance of being kept), computed by counting over the permutation's law
            order = np.argsort(rng.random(x.size))[:k]
            out = np.zeros(x.shape)
            out[order] = np.asarray(x, np.float64)[order] / (k / x.size)
            return out"""),
    "04.4": _src("""
        def ef_train(targets, k, lr, steps):
            workers, n = targets.shape
            w, ledgers = np.zeros(n), np.zeros((workers, n))
            for _ in range(steps):
                sent_sum = np.zeros(n)
                for i in range(workers):
                    total = (w - targets[i]) + ledgers[i]
                    t = np.partition(np.abs(total), n - k)[n - k]
                    sent = np.where(np.abs(total) >= t, total, 0.0)
                    ledgers[i] = total - sent
                    sent_sum += sent
                w -= lr * sent_sum / workers
            return w"""),
    "04.5": _src("""
        def dgc_step(w, grads, velocity, ledger, k, lr, momentum):
            u = momentum * velocity + grads
            v = ledger + u
            thresholds = -np.sort(-np.abs(v), axis=1)[:, k - 1:k]
            chosen = np.abs(v) >= thresholds
            sent = np.where(chosen, v, 0.0)
            return w - lr * sent.mean(axis=0), np.where(chosen, 0.0, u), np.where(chosen, 0.0, v)"""),
    "04.6": _src("""
        def ef21_train(targets, k, lr, steps):
            # shop by shop, and head office's g recomputed as the mean of the estimates: the same
            # numbers (a real head office cannot see the estimates, but it keeps exactly this)
            targets = np.asarray(targets, dtype=np.float64)
            w, est = np.zeros(targets.shape[1]), np.zeros(targets.shape)
            for _ in range(steps):
                for i in range(len(targets)):
                    change = (w - targets[i]) - est[i]
                    t = np.partition(np.abs(change), change.size - k)[change.size - k]
                    est[i] = est[i] + np.where(np.abs(change) >= t, change, 0.0)
                w = w - lr * est.mean(axis=0)
            return w, est"""),
    "05.2": _src("""
        def best_chunk(x, bits, chunks, max_error):
            # chunk by chunk, the squared error added up; the candidates tried from the fewest bytes
            flat = np.asarray(x, np.float64).ravel()
            size_of = lambda c: (flat.size * bits + 7) // 8 + 4 * len(range(0, flat.size, c))
            for chunk in sorted(chunks, key=size_of):
                codes, scales = absmax_quantize(x, bits, chunk)
                codes, squared = codes.ravel(), 0.0
                for j, s in enumerate(range(0, flat.size, chunk)):
                    squared += float(np.sum((codes[s:s + chunk] * np.float64(scales[j]) - flat[s:s + chunk]) ** 2))
                if np.sqrt(squared) <= max_error * np.linalg.norm(flat):
                    return chunk, size_of(chunk)"""),
    "05.3": _src("""
        def small_push(delta, scale, nights):
            # the distribution of one night, then a sum of independent nights
            low = np.floor(delta / scale) * scale
            p_up = (delta - low) / scale
            mean_one = low + p_up * scale
            var_one = p_up * (scale - (delta - low)) * scale
            nearest = low + scale if delta - low > scale / 2 else low
            return nights * nearest, nights * mean_one, np.sqrt(nights * var_one)"""),
    "05.6": _src("""
        def qsgd_encode(x, s, u):
            t = torch.as_tensor(x, dtype=torch.float64)
            norm = float(t.norm())
            if norm == 0:
                return 0.0, np.zeros(x.shape, np.int16)
            y = s * t.abs() / norm
            codes = torch.ceil(y - torch.as_tensor(u))        # up when u < the fraction: also unbiased
            return norm, (torch.sign(t) * codes).to(torch.int16).numpy()""", TORCH),
    "05.7": _src("""
        def onebit_adam_traffic(n_params, workers, steps, warmup):
            sizes = [n_params // workers + (j < n_params % workers) for j in range(workers)]
            packet = [(c + 7) // 8 + 4 for c in sizes]
            dense = compressed = 0
            for rank in range(workers):              # what each worker sends, added up
                dense += 2 * (workers - 1) / workers * 4 * n_params
                compressed += sum(packet[j] for j in range(workers) if j != rank) + (workers - 1) * packet[rank]
            return dense / compressed, steps * dense / (warmup * dense + (steps - warmup) * compressed)"""),
    "06.8": _src("""
        def best_bucket_cap(sizes, backward_s, alpha, beta, caps):
            ends = {}
            for cap in sorted(caps, reverse=True):   # from the largest, so a tie keeps the smallest
                back, comm, filled, spent = [], [], 0.0, 0.0
                for i, size in enumerate(sizes):
                    filled += size
                    spent += backward_s[i]
                    if filled >= cap or i == len(sizes) - 1:
                        back.append(spent)
                        comm.append(alpha + beta * filled)
                        filled, spent = 0.0, 0.0
                ends[cap] = float(overlap_timeline(np.array(back), np.array(comm))[-1, 1])
            best = min(sorted(ends), key=lambda c: ends[c])
            return best, ends[best]"""),
    "08.1": _src("""
        def check_outer_step(outer_step):
            # random workers (their average is not theta, almost surely), and two learning rates
            rng = np.random.default_rng(0)
            theta, workers = rng.standard_normal(5), rng.standard_normal((4, 5))
            avg = workers.mean(axis=0)
            verdicts = set()
            for lr in (1.0, 0.5):
                got = np.asarray(outer_step(theta, workers, lr, 0.0), dtype=np.float64)
                step = theta + lr * (avg - theta)
                if np.allclose(got, step, rtol=1e-4, atol=1e-4):
                    verdicts.add("right")
                elif np.allclose(got, 2 * theta - step, rtol=1e-4, atol=1e-4):
                    verdicts.add("reversed")
                else:
                    verdicts.add("wrong")
            return verdicts.pop() if len(verdicts) == 1 else "wrong"
    """),
    "08.2": _src("""
        def inner_steps_for(params, workers, compute_s, gbit_per_s, latency_s, bits, share):
            # count up (doubling, then bisecting) instead of solving for H
            t = 2 * (workers - 1) * latency_s + 2 * (workers - 1) / workers * params * bits / (gbit_per_s * 1e9)
            ok = lambda h: h * compute_s / (h * compute_s + t) >= share
            hi = 1
            while not ok(hi):
                hi *= 2
            lo = hi // 2
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            return hi"""),
    "08.5": _src("""
        def replica_report(log, group):
            # the last step it took part in, found by its index
            last = max((i for i, e in enumerate(log) if group in e["members"]), default=-1)
            behind = len(log) - 1 - last
            return {"missed": [e["step"] for e in log if group not in e["members"]], "behind": behind,
                    "peers": list(log[-1]["members"]) if behind else []}"""),
    "08.6": _src("""
        def audit_log(log):
            # step by step, with the previous quorum kept as a list
            out = {"stale": [], "lost": []}
            previous = None
            for e in log:
                if previous is not None:
                    behind = sorted(set(e["members"]) - set(previous))
                    if set(e["members"]) == set(behind):
                        out["lost"].append(e["step"])
                    out["stale"].extend([e["step"], g] for g in behind if g not in e["recovering"])
                previous = list(e["members"])
            return out"""),
    "09.1": _src("""
        def smallest_stage(params, ranks, memory_bytes, param_bytes, grad_bytes, optimizer_bytes):
            # bytes per parameter at each stage, as a list, then the first that fits
            per = [param_bytes + grad_bytes + optimizer_bytes,
                   param_bytes + grad_bytes + optimizer_bytes / ranks,
                   param_bytes + (grad_bytes + optimizer_bytes) / ranks,
                   (param_bytes + grad_bytes + optimizer_bytes) / ranks]
            fits = [s for s, b in enumerate(per) if params * b <= memory_bytes]
            return fits[0] if fits else None"""),
    "09.3": _src("""
        def qgz_reduce_scatter(grads, bits, block):
            # vectorised over the senders: one block of every sender's chunk at a time
            grads = np.asarray(grads, dtype=np.float64)
            ranks, n = grads.shape
            size, top = n // ranks, 2 ** (bits - 1) - 1
            out = np.zeros((ranks, size))
            for dest in range(ranks):
                chunks = grads[:, dest * size:(dest + 1) * size]
                for start in range(0, size, block):
                    part = chunks[:, start:start + block]
                    scale = np.abs(part).max(axis=1, keepdims=True) / top
                    safe = np.where(scale > 0, scale, 1.0)
                    out[dest, start:start + block] = (np.round(part / safe) * scale).mean(axis=0)
            return out"""),
    "09.4": _src("""
        def largest_model(memory_bytes, ranks, param_bytes, grad_bytes, optimizer_bytes, ledger):
            # the ledger's entries per parameter: (N-1)/N before the reduce-scatter, 1/N on the shard
            entries = {None: 0, "worker": ranks - 1, "shard": 1}[ledger]
            per_rank = param_bytes + grad_bytes + optimizer_bytes + 4 * entries     # bytes per N parameters
            return int(memory_bytes * ranks // per_rank)"""),
}
