"""envs.records: the dataset reader behind Countdown, MetaMathQA and SearchQA's data_path options."""

import pytest

from envs.records import read_records


def test_a_folder_given_as_a_dataset_file_is_named_as_a_folder(tmp_path):
    """A data_path pointing at a folder said 'does not exist' of a folder that exists; it now says what it is."""
    with pytest.raises(FileNotFoundError, match="is a folder, not a file"):
        read_records(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_records(str(tmp_path / "missing.jsonl"))
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n')
    assert read_records(str(tmp_path / "rows.jsonl")) == [{"a": 1}]
