"""python -m milktea.bench fsdp's verdicts, on made-up figures that must turn them both ways."""
import pytest

from milktea.bench import fsdp


def _result(int8_loss: float, int4_loss: float, step_s: float) -> dict:
    def row(rs_bytes, step=1.0, floor=0.9):
        t = {"bytes": rs_bytes, "dense": 4e6, "link_s": 0.1}
        return {"step_s": step, "compute_s": 0.5, "link_s": 0.4, "floor_s": floor,
                "traffic": {"reduce_scatter": t, "all_gather_forward": t}, "memory": {}}

    def loss(value):
        return {"eval_loss": value, "train_loss": value, "ledger": None, "memory": {"ledger": 0, "total": 1e6},
                "params": 1000}
    time = {"FSDP2 fp32": row(4e6), "int8": row(1.01e6), "int4": row(0.51e6),
            "int8 + int8 weights": row(1.01e6, step=step_s, floor=0.9)}
    return {"time": {1.0: time}, "loss_steps": 2,
            "loss": {"FSDP2 fp32": loss(1.0), "FSDP2 bf16 reduce": loss(1.001), "int8": loss(int8_loss),
                     "int4": loss(int4_loss)}}


@pytest.mark.parametrize("int8_loss, int4_loss, step_s, want", [
    (1.005, 1.015, 1.0, [True, True, True]),
    (0.90, 0.70, 1.0, [False, False, True]),        # far below fp32's loss is no closer to it
    (1.02, 1.03, 1.2, [False, False, False]),
])
def test_the_targets_turn_with_the_numbers(int8_loss, int4_loss, step_s, want, capsys):
    got = fsdp.report(_result(int8_loss, int4_loss, step_s))
    assert [t["ok"] for t in got] == want
    out = capsys.readouterr().out
    assert "bf16 reduce's own gap +0.10%" in out and out.count("[MISSED]") == want.count(False)
