"""benchmarks/report.py: every benchmark's JSON report carries its command, the commit and the machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from benchmarks.report import REPO, command_line, write_report


def test_a_report_carries_its_command_commit_and_machine(tmp_path: Path) -> None:
    out = tmp_path / "results" / "x.json"
    written = write_report(out, {"speedup": 2.0, "machine": "a platform string"}, command="python benchmarks/x.py")
    on_disk = json.loads(out.read_text())
    assert on_disk == written
    assert list(on_disk)[:2] == ["command", "speedup"] and on_disk["command"] == "python benchmarks/x.py"
    assert on_disk["machine"]["cpus"] == os.cpu_count() and isinstance(on_disk["machine"]["cpu_flags"], list)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    assert on_disk["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert on_disk["worktree_clean"] in (True, False, None)


def test_a_command_in_the_report_is_kept_and_a_given_one_wins(tmp_path: Path) -> None:
    """Scripts redact local paths in their own ``command`` (``--db DB``); an explicit command replaces it."""
    kept = write_report(tmp_path / "a.json", {"command": "python benchmarks/y.py --db DB", "n": 1})
    given = write_report(tmp_path / "b.json", {"command": "python benchmarks/y.py --db DB"}, command="python z.py")
    assert kept["command"] == "python benchmarks/y.py --db DB" and kept["n"] == 1
    assert given["command"] == "python z.py"


def test_the_command_names_the_script_relative_to_the_repository_and_quotes_arguments() -> None:
    argv = [str(REPO / "benchmarks" / "x.py"), "--db", "/tmp/a b.duckdb", "--n", "3"]
    assert command_line(argv) == "python benchmarks/x.py --db '/tmp/a b.duckdb' --n 3"
    assert command_line(["/elsewhere/x.py"]) == "python /elsewhere/x.py"


def test_a_changed_result_file_leaves_the_worktree_clean_and_changed_code_does_not(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    from benchmarks import report

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "x.py").write_text("print(1)\n")
    (tmp_path / "benchmarks" / "results" / "x.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    monkeypatch.setattr(report, "REPO", tmp_path)
    assert report.commit()["worktree_clean"] is True
    (tmp_path / "benchmarks" / "results" / "x.json").write_text('{"a": 1}\n')
    assert report.commit()["worktree_clean"] is True  # an earlier report of the same session
    (tmp_path / "benchmarks" / "x.py").write_text("print(2)\n")
    assert report.commit()["worktree_clean"] is False
