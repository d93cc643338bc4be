"""experiments/filter_ablation.py reports each arm as docs/quickstart.md does: mean +- sample std over seeds."""

import importlib.util
import os

SPEC = importlib.util.spec_from_file_location(
    "filter_ablation", os.path.join(os.path.dirname(__file__), "..", "experiments", "filter_ablation.py"))
filter_ablation = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(filter_ablation)


def test_arm_line_is_mean_and_sample_std_as_the_docs_quote():
    # docs/quickstart.md's three seeds: no filter 79.5 +- 4.8, top_p 0.9 81.5 +- 4.7 (sample std, ddof 1).
    line = filter_ablation.arm_line({"no_filter": [0.740, 0.816, 0.828], "top_p_0.9": [0.762, 0.828, 0.854]})
    assert "no_filter: 0.795 +- 0.048 (n=3)" in line
    assert "top_p_0.9: 0.815 +- 0.047 (n=3)" in line
    assert "sample std" in line


def test_arm_line_with_one_seed_has_no_spread():
    assert "no_filter: 0.700 +- - (n=1)" in filter_ablation.arm_line({"no_filter": [0.7], "top_p_0.9": []})
