"""archspec/core/files.py: the one check every floor makes before reading a user's file."""

from __future__ import annotations

import os

import pytest

from archspec.core.files import SpecialFile, file_problem, read_regular_file


def test_a_readable_regular_file_has_no_problem(tmp_path):
    path = tmp_path / "a.pt"
    path.write_bytes(b"x")
    assert file_problem(str(path)) is None


def test_each_kind_of_path_that_is_no_readable_file_says_what_it_is(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert file_problem(str(tmp_path / "missing")) == ("missing", "does not exist")
    assert file_problem(str(tmp_path)) == ("folder", "is a directory")
    assert file_problem(str(fifo)) == ("special", "is not a regular file (a named pipe (FIFO))")
    assert file_problem("/dev/null") == ("special", "is not a regular file (a character device)")
    assert file_problem(str(tmp_path / "a\0b"))[0] == "unreadable"  # a NUL in the path


def test_reading_a_fifo_with_no_writer_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SpecialFile, match="named pipe"):
        read_regular_file(str(fifo), 10)
    with pytest.raises(IsADirectoryError):
        read_regular_file(str(tmp_path), 10)
