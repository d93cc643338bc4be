"""RAGEN's static env: local data layouts (JSONL, parquet, hub shards, save_to_disk folders), the errors that name
the expected layout, seeded rows, rewards, the registry entry and configs/static.py."""

import json
import random

import pytest

from envs.registry import make
from envs.static import StaticEnv, dataset_spec, load_rows

GSM8K_ROWS = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(1, 6)]
MMLU_ROWS = [{"question": "2 + 2 = ?", "choices": ["3", "4", "5", "6"], "answer": 1, "subject": "math"},
             {"question": "Largest?", "choices": ["1", "2", "3", "9"], "answer": 3, "subject": "math"}]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return path


def test_gsm8k_from_a_jsonl_file_picks_ragens_row_and_scores_numerically(tmp_path):
    env = StaticEnv("gsm8k", data_path=str(write_jsonl(tmp_path / "train.jsonl", GSM8K_ROWS)))
    for seed in (0, 7, 123):
        question, info = env.reset(seed)
        random.seed(seed)  # RAGEN: with all_seed(seed): random.randint(0, len - 1)
        row = GSM8K_ROWS[random.randint(0, len(GSM8K_ROWS) - 1)]
        assert question == row["question"] and info["label"] == row["answer"].split("####")[1].strip()
    assert env.step("I think 9") == ("Incorrect. Please think again.", 0.0, False, False,
                                     {"action_is_valid": True, "success": False})
    obs, reward, terminated, truncated, info = env.step(f"it is {info['label']}")
    assert (obs, reward, terminated, truncated, info["success"]) == ("Correct!", 0.5, True, False, True)


def test_max_attempts_truncates_after_that_many_wrong_answers(tmp_path):
    env = StaticEnv("gsm8k", data_path=str(write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS)), max_attempts=2)
    env.reset(1)
    assert env.step("nothing")[2:4] == (False, False)
    assert env.step("nothing")[2:4] == (False, True)
    assert env.step("nothing")[4]["action_is_valid"] is False


def test_mmlu_stem_from_hub_shards_in_a_subfolder(tmp_path):
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", MMLU_ROWS)
    write_parquet(tmp_path / "data" / "train-00000-of-00001.parquet", MMLU_ROWS[:1])
    env = make("Static", dataset_name="mmlu-stem", data_path=str(tmp_path))
    assert [r["question"] for r in env.rows] == ["2 + 2 = ?", "Largest?"]   # split "test", not train
    question, info = env.reset(5)
    assert question.splitlines()[1:] in (["A. 3", "B. 4", "C. 5", "D. 6"], ["A. 1", "B. 2", "C. 3", "D. 9"])
    assert env.instruction().startswith("You are answering multiple-choice questions")
    assert env.step(info["label"])[1] == 1.0


def test_split_and_max_instances_select_rows(tmp_path):
    write_jsonl(tmp_path / "main" / "train.jsonl", GSM8K_ROWS)
    write_jsonl(tmp_path / "main" / "test.jsonl", GSM8K_ROWS[:2])
    assert len(load_rows(dataset_spec("gsm8k"), str(tmp_path))) == 5
    assert len(load_rows(dataset_spec("gsm8k"), str(tmp_path), split="test")) == 2
    assert len(load_rows(dataset_spec("gsm8k"), str(tmp_path), max_instances=3)) == 3


def test_a_folder_with_one_unnamed_file_uses_it(tmp_path):
    rows = [{"query": "1 + 1?", "response": "The answer is: 2", "type": "x"}]
    (tmp_path / "MetaMathQA-395K.json").write_text(json.dumps(rows))
    env = StaticEnv("metamathqa", data_path=str(tmp_path))
    assert env.reset(0) == ("1 + 1?", {"label": "2"})
    assert env.step(" 2 ")[1] == 1.0


def test_theoremqa_and_math_rows(tmp_path):
    theorem = [{"Question": "Is 7 prime?", "Answer": True, "Answer_type": "bool"}]
    env = StaticEnv("theoremqa", data_path=str(write_parquet(tmp_path / "t.parquet", theorem)))
    assert env.reset(3)[1]["label"] == "True" and env.step("true")[1] == 1.0
    math_rows = [{"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$."}]
    env = StaticEnv("math", data_path=str(write_jsonl(tmp_path / "m" / "test.jsonl", math_rows)))
    assert env.reset(0)[1]["label"] == "\\frac{1}{2}"
    assert env.step("0.5")[1] == 0.0
    lenient = StaticEnv("math", data_path=str(tmp_path / "m"), answer_match="lenient")
    lenient.reset(0)
    assert lenient.step("0.5")[1] == 1.0


def test_missing_files_name_the_expected_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*train.jsonl.*question, answer.*openai/gsm8k"):
        StaticEnv("gsm8k", data_path=str(tmp_path / "nowhere"))
    write_jsonl(tmp_path / "other.jsonl", GSM8K_ROWS)
    write_jsonl(tmp_path / "more.jsonl", GSM8K_ROWS)
    with pytest.raises(FileNotFoundError, match=r"no file for split 'train'.*holds more.jsonl, other.jsonl"):
        StaticEnv("gsm8k", data_path=str(tmp_path))
    with pytest.raises(ValueError, match="needs data_path.*TIGER-Lab/TheoremQA"):
        StaticEnv("theoremqa")


def test_rows_without_the_datasets_columns_are_refused_by_row(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [*GSM8K_ROWS, {"question": "q"}])
    with pytest.raises(ValueError, match=r"row 5 lacks column\(s\) \['answer'\]"):
        StaticEnv("gsm8k", data_path=str(path))
    math_path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "p"}])
    with pytest.raises(ValueError, match="answer or solution"):
        StaticEnv("math", data_path=str(math_path))


def test_saved_datasets_folder_loads_with_load_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "gsm8k_saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(GSM8K_ROWS),
                          "test": datasets.Dataset.from_list(GSM8K_ROWS[:1])}).save_to_disk(str(folder))
    assert len(StaticEnv("gsm8k", data_path=str(folder)).rows) == 5
    assert len(StaticEnv("gsm8k", data_path=str(folder), split="test").rows) == 1
    with pytest.raises(ValueError, match=r"holds splits \['train', 'test'\]"):
        StaticEnv("gsm8k", data_path=str(folder), split="validation")
    single = tmp_path / "mmlu_saved"
    datasets.Dataset.from_list(MMLU_ROWS).save_to_disk(str(single))
    assert StaticEnv("mmlu", data_path=str(single)).reset(0)[1]["label"] in ("B", "D")


def test_without_data_metamathqa_uses_offline_problems():
    env = make("Static")
    question, info = env.reset(11)
    assert question and info["label"]
    assert env.step(info["label"])[1] == 1.0
    assert env.reset(11) == (question, info)


def test_ragen_keys_and_bad_arguments():
    with pytest.raises(ValueError, match="cache_dir.*never downloads"):
        make("Static", cache_dir="./data")
    with pytest.raises(ValueError, match="Unknown static env dataset_name 'gpqa'"):
        make("Static", dataset_name="gpqa")
    with pytest.raises(ValueError, match="answer_match"):
        StaticEnv(answer_match="fuzzy")


def test_config_variants_validate():
    from configs.static import get_config
    from ragen_jax.config import validate_config

    tiny = get_config("tiny")
    validate_config(tiny)
    assert (tiny.env.name, tiny.env.max_actions_per_traj, tiny.model.preset) == ("Static", 1, "tiny")
    assert get_config("tiny,gsm8k").env.kwargs.dataset_name == "gsm8k"
    for variant in ("metamathqa", "gsm8k", "theoremqa", "math", "mmlu", "mmlu_stem", "grpo"):
        validate_config(get_config(variant))


@pytest.mark.slow
def test_tiny_eval_end_to_end(tmp_path):
    """configs/static.py:tiny under `--mode=eval` (test_configs_eval's in-process harness): RAGEN's metrics and the dump."""
    from test_configs_eval import check_eval_output, run_tiny_eval, tiny_eval_config

    cfg = tiny_eval_config("static")
    metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, "Static", cfg)
    assert metrics["val/Static/env_error"] == 0.0
