"""Plain data: the only thing that crosses the pipe between the grader and a child, both ways.

What a case's arguments and a graded function's return value may be (docs/grading.md, "Case"):
None, bool, int (below 2**64), float (inf and nan too), str, bytes (and bytearray, memoryview),
numpy scalars and arrays of booleans, integers or floats (torch tensors become arrays; a
bfloat16 one float32), and lists, tuples and dicts with string keys of these, nested at most
16 deep. A tuple comes back as a list, a numpy scalar as a Python number.

`encode` turns a Python, numpy or torch value into JSON-able data (arrays as dtype, shape and
base64 bytes; never pickle), `decode` checks every piece of such data on the way back (the other
side may be hostile). Like child.py, this file never imports milktea: in the sandbox it sits
beside child.py as /grader/wire.py.

    >>> import numpy as np
    >>> decode(encode([1, np.arange(3, dtype=np.int8)]))[1].tolist()
    [0, 1, 2]
"""
import base64
import math

ARRAY_DTYPES = ("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8")
MAX_DEPTH = 16
# what a learner reads when a value can't be graded: the child puts the learner's language here
WORDS = {
    "deep": "the result is nested too deeply",
    "scalar": "a numpy {dtype} scalar cannot be graded",
    "dtype": "an array of dtype {dtype} cannot be graded (use a number dtype)",
    "keys": "a dict with non-string keys cannot be graded",
    "type": ("a value of type {type} cannot be graded: return None, True/False, a number, a string, bytes, "
             "a numpy array or torch tensor of numbers, or lists, tuples and dicts (with string keys) of these"),
}


def encode(value, depth=0):
    """Python/numpy/torch value -> JSON-able data. Raises TypeError for anything else."""
    import numpy as np
    if depth > MAX_DEPTH:
        raise TypeError(WORDS["deep"])
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, np.generic):
        if value.dtype.kind in "biuf":
            return encode(value.item(), depth)
        raise TypeError(WORDS["scalar"].format(dtype=value.dtype))
    mod = type(value).__module__ or ""
    if mod.startswith("torch") and hasattr(value, "detach"):   # a torch.Tensor
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        value = t.numpy()
    if isinstance(value, np.ndarray):
        arr = np.array(value, order="C", copy=True)   # keeps 0-d arrays 0-d
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if dt.str not in ARRAY_DTYPES:
            raise TypeError(WORDS["dtype"].format(dtype=arr.dtype))
        arr = arr.astype(dt, copy=False)
        return {"__nd__": [dt.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode("ascii")]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(WORDS["keys"])
        return {"__map__": {k: encode(v, depth + 1) for k, v in value.items()}}
    raise TypeError(WORDS["type"].format(type=type(value).__name__))


def decode(data, depth=0, budget=None):
    """JSON data -> Python/numpy value, checking every piece (the other side may be hostile).
    Raises ValueError on anything that `encode` would not have produced."""
    import numpy as np
    budget = [256 << 20] if budget is None else budget     # bytes of arrays allowed in total
    if depth > MAX_DEPTH + 1:
        raise ValueError("nested too deeply")
    if data is None or isinstance(data, (bool, str, float)):
        return data
    if isinstance(data, int):
        if abs(data) >= 1 << 64:
            raise ValueError("integer out of range")
        return data
    if isinstance(data, list):
        return [decode(v, depth + 1, budget) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("unexpected object")
    (tag, body), = data.items()
    if tag == "__float__" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "__bytes__" and isinstance(body, str):
        return base64.b64decode(body.encode("ascii"), validate=True)
    if tag == "__map__" and isinstance(body, dict):
        return {k: decode(v, depth + 1, budget) for k, v in body.items()}
    if tag == "__nd__" and isinstance(body, list) and len(body) == 3:
        dt, shape, raw = body
        if dt not in ARRAY_DTYPES or not isinstance(raw, str) or not isinstance(shape, list):
            raise ValueError("bad array header")
        if len(shape) > 8 or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape):
            raise ValueError("bad array shape")
        raw = base64.b64decode(raw.encode("ascii"), validate=True)
        count = math.prod(shape)
        if len(raw) != count * np.dtype(dt).itemsize:
            raise ValueError("array bytes do not match its shape")
        budget[0] -= len(raw)
        if budget[0] < 0:
            raise ValueError("arrays too large")
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    raise ValueError(f"unknown tag {tag!r}")
