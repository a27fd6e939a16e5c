"""kbench.history: a case's runs in order, and each implementation's steps judged as kbench compare judges."""

import json

from fake_records import A100, attention_history, commit, gpu_record

from kbench import compare, history, results

ALPHA = 0.01


def _histories(records, threshold=0.05):
    return history.histories(records, lambda suite: threshold, ALPHA)


def test_records_of_one_run_are_one_run_and_a_new_commit_or_a_repeat_starts_another():
    records = [gpu_record("naive", commit(1), "2026-11-01T10:00:00+00:00", 5.8),
               gpu_record("sdpa", commit(1), "2026-11-01T10:00:05+00:00", 1.5),
               gpu_record("triton-fa2", commit(1), "2026-11-01T11:00:00+00:00", 1.0),  # --impl later, same commit
               gpu_record("naive", commit(1), "2026-11-02T10:00:00+00:00", 5.8),  # naive again: a second run
               gpu_record("naive", commit(2), "2026-11-03T10:00:00+00:00", 5.8)]
    runs = history.split_runs(list(reversed(records)))  # ordered by created_at, not by the order read
    assert [[r.name for r in run.records] for run in runs] == [["naive", "sdpa", "triton-fa2"], ["naive"], ["naive"]]
    assert runs[0].label == "1111111 2026-11-01 10:00"


def test_a_planted_regression_is_the_one_slower_step():
    (case,) = _histories(attention_history(slower_at=4))
    assert len(case.runs) == 6
    assert [(s.label, s.run) for s in case.regressions] == [("sdpa", 4)]
    step = case.regressions[0]
    assert 1.18 < step.pair.ratio < 1.22 and step.pair.p_value < ALPHA
    assert step.pair.base.where == "3333333 2026-11-13 10:00" and step.pair.current.where == "4444444 2026-11-14 10:00"
    # Steady implementations (1 % noise) and sdpa after its step are never "slower".
    for s in case.steps:
        if (s.label, s.run) != ("sdpa", 4):
            assert s.pair.decision != "slower", (s.label, s.run, s.pair.decision)
    assert case.step("sdpa", 5).pair.decision == "same"
    # A FAIL step is compare's "failed" and a SKIP after an OK is "missing": neither is a regression.
    assert case.step("cupy-fa2", 3).pair.decision == "failed"
    assert case.step("cupy-fa2", 5).pair.decision == "missing"


def test_no_regression_without_a_slower_run():
    (case,) = _histories(attention_history(slower_at=None))
    assert case.regressions == [] and len(case.steps) == 4 * 5


def test_the_threshold_decides_as_in_compare():
    # sdpa's 20 % is within a 25 % threshold: not slower (undecided or same), as kbench compare would say.
    (case,) = _histories(attention_history(slower_at=4), threshold=0.25)
    assert case.regressions == []


def test_steps_decide_exactly_as_kbench_compare(tmp_path, cli):
    """The step from run 3 to run 4 and `kbench compare run3 run4` give the same decisions and figures."""
    records = attention_history(slower_at=4)
    (case,) = _histories(records)
    base, current = tmp_path / "run3.jsonl", tmp_path / "run4.jsonl"
    results.write_atomic(base, [r for r in records if history.commit_of(r) == commit(3)])
    results.write_atomic(current, [r for r in records if history.commit_of(r) == commit(4)])
    result = cli("compare", base, current, "--format", "json", "--allow-missing")
    pairs = {p["implementation"]: p for p in json.loads(result.stdout)["pairs"]}
    assert pairs["sdpa"]["decision"] == "slower"
    for label in ("naive", "sdpa", "triton-fa2", "cupy-fa2"):
        pair = case.step(label, 4).pair
        assert pair.decision == pairs[label]["decision"], label
        if pair.p_value is not None:
            assert pair.p_value == pairs[label]["p_value"] and pair.ratio - 1 == pairs[label]["change"]


def test_each_gpu_has_its_own_history():
    # The same case on an A100, three times slower: a history of its own, never a step from the H200's.
    records = attention_history(runs=2, slower_at=None) + [
        gpu_record("sdpa", commit(9), "2026-11-20T10:00:00+00:00", 4.5, gpu=A100)]
    h200, a100 = _histories(records)
    assert (h200.gpu, a100.gpu) == ("NVIDIA H200", "NVIDIA A100-SXM4-80GB")
    assert len(a100.runs) == 1 and a100.steps == [] and h200.regressions == []


def test_records_without_a_gpu_are_grouped_as_cpu():
    from fake_records import fake_record

    (case,) = _histories([fake_record("naive"), fake_record("naive", median=2.0)])
    assert case.gpu == history.NO_GPU and len(case.runs) == 2
    assert case.steps[0].pair.decision in compare.DECISIONS
