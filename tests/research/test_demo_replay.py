"""research.demojudge.replay: stages run at their own commits, their hashes recorded, then checked on a replay.

The build module here is a stand-in written into a throwaway git repository (a real build takes hours): it writes
weights whose bytes depend on its arguments, the --init folder's weights and a constant of the commit's code, so a
stage that ran at the wrong commit, with the wrong arguments or on the wrong prior stage gives another hash.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from research.demojudge import replay

pytestmark = pytest.mark.research

BUILD = '''
import hashlib, json, sys
from pathlib import Path
VERSION = {version!r}
args = sys.argv[1:]
out = Path(args[args.index("--out") + 1])
prior = b""
if "--init" in args:
    prior = (Path(args[args.index("--init") + 1]) / "model.safetensors").read_bytes()
out.mkdir(parents=True)
(out / "model.safetensors").write_bytes(hashlib.sha256(VERSION.encode() + json.dumps(args[args.index("--steps"):]).encode() + prior).digest())
(out / "demo_card.json").write_text(json.dumps({{"version": VERSION}}))
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A repository whose fake build changed between two commits, and a plan of three stages across them."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    commits = []
    for version in ("walk-1", "walk-2"):
        (repo / "fakebuild.py").write_text(BUILD.format(version=version))
        _git(repo, "add", "fakebuild.py")
        _git(repo, "commit", "-qm", version)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    plan = [{"stage": k, "name": f"s{k}", "module": "fakebuild", "commit": commit, "argv": ["--steps", str(k)],
             "seed": k, "ranges": "narrow"} for k, commit in enumerate([commits[0], commits[1], commits[1]], start=1)]
    return repo, plan


def test_a_plan_replays_each_stage_at_its_commit_and_a_card_replay_matches_bit_for_bit(history, tmp_path, capsys):
    repo, plan = history
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert replay.main(["--out", str(tmp_path / "first"), "--stages", str(tmp_path / "plan.json"),
                        "--repo", str(repo)]) == 0
    card = json.loads((tmp_path / "first" / "stage3" / "demo_card.json").read_text())
    assert card["version"] == "walk-2"  # the last stage ran the later commit's code
    stages = card["stages"]
    assert [s["stage"] for s in stages] == [1, 2, 3]
    assert stages[0]["commit"] == plan[0]["commit"] and stages[2]["command"].endswith("--init STAGE2 --steps 3")
    assert len({s["sha256"] for s in stages}) == 3 and all(len(s["sha256"]) == 64 for s in stages)
    assert _git(repo, "worktree", "list").count("\n") == 0  # every worktree was removed

    assert replay.main(["--out", str(tmp_path / "again"), "--from", str(tmp_path / "first" / "stage3"),
                        "--repo", str(repo)]) == 0
    report = json.loads((tmp_path / "again" / "replay.json").read_text())
    assert [s["matches"] for s in report["stages"]] == [True, True, True]
    assert "differ" not in capsys.readouterr().out


def test_a_stage_run_at_another_commit_is_reported_as_differing(history, tmp_path, capsys):
    repo, plan = history
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    replay.main(["--out", str(tmp_path / "first"), "--stages", str(tmp_path / "plan.json"), "--repo", str(repo)])
    card_path = tmp_path / "first" / "stage3" / "demo_card.json"
    card = json.loads(card_path.read_text())
    card["stages"][1]["commit"] = plan[0]["commit"]  # a record naming the wrong code for stage 2
    card_path.write_text(json.dumps(card))
    replay.main(["--out", str(tmp_path / "again"), "--from", str(tmp_path / "first" / "stage3"), "--repo", str(repo)])
    report = json.loads((tmp_path / "again" / "replay.json").read_text())
    assert [s["matches"] for s in report["stages"]] == [True, False, False]  # and every stage built on it
    assert "stages [2, 3] differ bit for bit" in capsys.readouterr().out


@pytest.mark.parametrize("content, problem", [
    pytest.param("{}", "records no build stages", id="a card without stages (an unreplayable judge)"),
    pytest.param("[]", "records no build stages", id="an empty plan"),
    pytest.param('[{"stage": 1}]', "stage 1 lacks name, module, commit", id="a stage without its command"),
    pytest.param("not json", "not readable JSON", id="not JSON"),
])
def test_an_unusable_record_is_refused_in_one_line_before_any_work(tmp_path, content, problem):
    (tmp_path / "plan.json").write_text(content)
    with pytest.raises(SystemExit, match=problem):
        replay.main(["--out", str(tmp_path / "out"), "--stages", str(tmp_path / "plan.json")])
    assert not (tmp_path / "out").exists()


def test_an_out_folder_holding_other_files_is_refused(history, tmp_path):
    repo, plan = history
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        replay.main(["--out", str(tmp_path / "out"), "--stages", str(tmp_path / "plan.json"), "--repo", str(repo)])
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_the_careless_plan_names_commits_this_history_holds():
    """The plan that rebuilds the careless running-sum judge: four stages, each at a commit of this repository."""
    root = Path(replay.__file__).resolve().parents[2]
    stages = replay.read_stages(root / "research" / "demojudge" / "careless_stages.json")
    assert [s["name"] for s in stages] == ["b0", "b2", "c1", "c2"]
    assert [s["seed"] for s in stages] == [1234, 1235, 1250, 1251]  # each stage's --seed is the seed it records
    assert all(f"--seed {s['seed']}" in " ".join(s["argv"]) for s in stages)
    if not (root / ".git").exists() or (root / ".git" / "shallow").exists():
        pytest.skip("not a full git checkout")
    for s in stages:
        assert len(replay.git("rev-parse", "--verify", f"{s['commit']}^{{commit}}", cwd=root)) == 40


@pytest.mark.parametrize(("card", "written"), [
    pytest.param({"domain": "running-sums", "build_args": {"pairs": 30, "seed": 3}}, True, id="running-sums"),
    pytest.param({"domain": "reflectrm.demo.steps", "build_args": {"pairs": 30, "seed": 3}}, True, id="older-card"),
    pytest.param({"what": "arithmetic: no domain key"}, False, id="arithmetic"),
    pytest.param({"version": "walk-2"}, False, id="a-fake-stage"),
])
def test_a_replayed_running_sum_judge_gets_its_record_of_what_it_trained_on(card, written, tmp_path):
    from reflectrm.demo.heldout import TRAINED_FILE, replay_trained_problems, trained_problems

    (tmp_path / "demo_card.json").write_text(json.dumps(card))
    replay.record_trained(tmp_path)
    assert (tmp_path / TRAINED_FILE).is_file() is written
    if written:
        assert trained_problems(card, folder=tmp_path) == replay_trained_problems(card)
