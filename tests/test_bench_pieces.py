"""The pure parts of two benchmarks: the dtype bench's choice and the scaling bench's plot."""

from bench.dtype import choose
from bench.scaling import plot


def test_dtype_choice_skips_a_faster_variant_whose_loss_does_not_fall():
    rows = {"float32": {"losses": [1.9, 0.5], "sample_tps": 40.0, "train_tps": 250.0},
            "bfloat16 autocast": {"losses": [1.9, 1.6], "sample_tps": 80.0, "train_tps": 600.0},
            "4-bit NF4, float32 compute": {"losses": [1.9, 0.52], "sample_tps": 30.0, "train_tps": 300.0}}
    assert choose(rows) == ("float32", "4-bit NF4, float32 compute")
    assert [r["agrees"] for r in rows.values()] == [True, False, True]


def test_scaling_plot_writes_a_png(tmp_path):
    def side(s):
        return {"total_s": s, "sample_s": s / 2, "update_s": s / 2}

    rows = [{"model": "tiny", "sweep": sweep, "group": g, "turns": t, "agentlab": side(t + g), "peer": side(2 * t + g)}
            for sweep, g, t in [("turns", 8, 5), ("turns", 8, 20), ("group", 4, 10), ("group", 16, 10)]]
    path = plot(rows, tmp_path / "scaling.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 5000
