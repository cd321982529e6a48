import shutil
import subprocess
import threading
import tomllib
from pathlib import Path

import pytest

from evolver.errors import ProgramRepoError
from evolver.programs import ProgramRepo, content_hash

SKILL = "---\nname: {name}\ndescription: when {name} is needed\n---\n\n{body}\n"


@pytest.fixture
def seed_dir(tmp_path):
    seed = tmp_path / "seed"
    (seed / "skills" / "alpha").mkdir(parents=True)
    (seed / "skills" / "alpha" / "SKILL.md").write_text(SKILL.format(name="alpha", body="Do alpha."))
    (seed / "harness").mkdir()
    (seed / "harness" / "harness.py").write_text("class Harness:\n    pass\n")
    (seed / "harness" / "__pycache__").mkdir()
    (seed / "harness" / "__pycache__" / "harness.cpython-311.pyc").write_bytes(b"junk")
    (seed / "prompt.md").write_text("You play text games.\n")
    return seed


@pytest.fixture
def repo(tmp_path, seed_dir):
    r = ProgramRepo(tmp_path / "store")
    r.init(seed_dir, {"id": "seed", "model": "smollm2-135m"})
    return r


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo.path, capture_output=True, text=True, check=True).stdout


def candidate(repo, cid, parent="seed", skill_body=None, prompt=None, manifest=None):
    wt = repo.new_candidate(cid, parent)
    if skill_body is not None:
        (wt / "skills" / cid).mkdir(parents=True, exist_ok=True)
        (wt / "skills" / cid / "SKILL.md").write_text(SKILL.format(name=cid, body=skill_body))
    if prompt is not None:
        (wt / "prompt.md").write_text(prompt)
    m = {"parent": parent, "operator": "create", "proposal": f"p-{cid}", "model": "smollm2-135m", **(manifest or {})}
    return repo.commit_candidate(cid, m, f"create skill {cid}")


def test_init_is_idempotent(tmp_path, seed_dir):
    r = ProgramRepo(tmp_path / "store")
    seed = r.init(seed_dir, {"id": "seed", "model": "smollm2-135m"})
    assert seed.id == "seed" and seed.model == "smollm2-135m" and Path(seed.root) == r.path
    assert r.manifest("seed")["operator"] == "seed" and r.manifest("seed")["scores"] == {}
    assert set(r.files("seed")) == {".gitignore", "program.toml", "prompt.md", "harness/harness.py",
                                    "skills/alpha/SKILL.md"}  # no __pycache__
    assert git(r, "branch", "--show-current").strip() == "main"
    assert git(r, "config", "core.quotepath").strip() == "off"
    again = ProgramRepo(tmp_path / "store").init(seed_dir, {"id": "other"})
    assert (again.id, again.commit, again.hash) == ("seed", seed.commit, seed.hash)
    assert git(r, "rev-list", "--count", "--all").strip() == "1"
    assert seed.hash == content_hash(r.path) != content_hash(seed_dir)  # the seed folder lacks the model
    (seed_dir / "program.toml").write_text('id = "x"\nmodel = "smollm2-135m"\n')
    assert content_hash(seed_dir) == seed.hash  # only files and the model count, not the id


def test_parallel_candidates_from_threads(repo):
    results, errors = {}, []

    def build(i):
        try:
            results[i] = candidate(repo, f"c{i}", skill_body=f"Skill number {i}.")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=build, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors
    seed_sha = repo.resolve("seed")
    for i, program in results.items():
        assert program.id == f"c{i}" and Path(program.root) == repo.worktrees_dir / f"c{i}"
        assert program.manifest["parent"] == "seed" and program.manifest["operator"] == "create"
        assert git(repo, "rev-parse", f"cand/c{i}").strip() == program.commit == repo.resolve(f"c{i}")
        assert git(repo, "rev-parse", f"{program.commit}^").strip() == seed_sha
        assert (Path(program.root) / "skills" / f"c{i}" / "SKILL.md").exists()
        assert not git(repo, "-C", program.root, "status", "--porcelain").strip()
    assert len({p.hash for p in results.values()} | {repo.checkout("seed").hash}) == 4
    body = git(repo, "log", "-1", "--format=%B", "cand/c0")
    assert body.startswith("create skill c0\n") and "operator: create" in body and "proposal: p-c0" in body
    graph = git(repo, "log", "--all", "--graph", "--decorate", "--oneline")
    for i in range(3):
        assert f"cand/c{i}" in graph and f"tag: program/c{i}" in graph


def test_content_hash(repo):
    seed = repo.checkout("seed")
    same = candidate(repo, "same", manifest={"operator": "edit", "scores": {"dev": 0.3}})
    assert same.hash == seed.hash  # an empty change is visible to the caller
    changed = candidate(repo, "changed", skill_body="Different.")
    assert changed.hash != seed.hash
    assert content_hash(Path(changed.root)) == changed.hash == repo.hash_at("changed")
    edited = repo.new_candidate("edited", "seed")
    (edited / "skills" / "alpha" / "SKILL.md").write_text(SKILL.format(name="alpha", body="Do alpha better."))
    assert repo.commit_candidate("edited", {"parent": "seed", "model": "smollm2-135m"}, "edit").hash != seed.hash
    other_model = candidate(repo, "bigger", manifest={"model": "qwen2.5-7b"})
    assert other_model.hash != seed.hash
    wt = repo.new_candidate("inherits", "seed")  # no model given: the parent's is kept
    inherits = repo.commit_candidate("inherits", {"parent": "seed"}, "same files")
    assert inherits.model == "smollm2-135m" and inherits.hash == seed.hash and wt == Path(inherits.root)


def test_record_scores_amends_and_keeps_hash(repo):
    c = candidate(repo, "c1", skill_body="x")
    repo.tag("frontier/c1", "c1")
    new = repo.record_scores("c1", {"dev": 0.5, "context_tokens": 812.0})
    assert new != c.commit and repo.resolve("c1") == new == repo.tags()["frontier/c1"]
    assert repo.manifest("c1")["scores"] == {"dev": 0.5, "context_tokens": 812.0}
    assert repo.hash_at("c1") == c.hash
    assert git(repo, "rev-parse", "cand/c1").strip() == new
    assert git(repo, "rev-parse", f"{new}^").strip() == repo.resolve("seed")  # same parent: history stays linear
    assert not git(repo, "-C", c.root, "status", "--porcelain").strip()
    assert tomllib.loads((Path(c.root) / "program.toml").read_text())["scores"]["dev"] == 0.5
    repo.remove_worktree("c1")
    newer = repo.record_scores("c1", {"test": 0.4})  # without a worktree
    assert repo.manifest("c1")["scores"] == {"dev": 0.5, "context_tokens": 812.0, "test": 0.4}
    assert git(repo, "rev-parse", "cand/c1").strip() == newer
    assert len([e for e in repo.log() if e["id"] == "c1"]) == 1  # the old commit is gone from history
    seed_new = repo.record_scores("seed", {"dev": 0.1})  # the seed on main, in the repository's own tree
    assert git(repo, "rev-parse", "main").strip() == seed_new
    assert not git(repo, "status", "--porcelain").strip()


def test_record_scores_after_children_uses_a_note(repo):
    parent = candidate(repo, "p1", skill_body="parent")
    child = candidate(repo, "k1", parent="p1", skill_body="child")
    sha = repo.record_scores("p1", {"test": 0.9})
    assert sha == parent.commit == repo.resolve("p1")  # not rewritten: the child keeps its parent
    assert git(repo, "rev-parse", f"{child.commit}^").strip() == parent.commit
    assert repo.manifest("p1")["scores"] == {"test": 0.9}
    assert next(e for e in repo.log() if e["id"] == "p1")["scores"] == {"test": 0.9}


def test_tags_resolve_manifest_log(repo):
    c1 = candidate(repo, "c1", skill_body="one")
    c2 = candidate(repo, "c2", parent="c1", prompt="New prompt.\n")
    repo.tag("frontier/c1", "c1")
    repo.tag("frontier/c2", "c2")
    repo.tag("best", "c2")
    assert repo.tags() == {"frontier/c1": c1.commit, "frontier/c2": c2.commit}
    repo.untag("frontier/c1")
    repo.untag("frontier/absent")
    assert set(repo.tags()) == {"frontier/c2"} and repo.tags("best") == {"best": c2.commit}
    for ref in ("c2", "program/c2", "cand/c2", "best", c2.commit[:10], c2.commit):
        assert repo.resolve(ref) == c2.commit
    with pytest.raises(ProgramRepoError, match="unknown program or ref 'nope'.*c1, c2, seed"):
        repo.resolve("nope")
    m = repo.manifest("c2")
    assert (m["id"], m["parent"], m["operator"], m["proposal"], m["model"]) == ("c2", "c1", "create", "p-c2",
                                                                              "smollm2-135m")
    log = repo.log()
    assert [e["id"] for e in log] == ["seed", "c1", "c2"]
    assert log[2] == {"id": "c2", "commit": c2.commit, "parent": "c1", "operator": "create", "scores": {},
                      "message": "create skill c2", "tags": ["best", "frontier/c2", "program/c2"]}


def test_diff_show_files(repo):
    candidate(repo, "c1", skill_body="Brand new skill body.")
    d = repo.diff("seed", "c1")
    assert "skills/c1/SKILL.md" in d and "+Brand new skill body." in d and "program.toml" in d
    text = repo.show("c1")
    assert text.startswith("# program c1") and "You play text games." in text
    assert "## skills/alpha/SKILL.md" in text and "Brand new skill body." in text and "- harness/harness.py" in text
    files = repo.files("c1")
    assert files["skills/c1/SKILL.md"].startswith("---\nname: c1")
    assert repo.diff("c1", "c1") == ""


def test_checkout_and_worktree_lifecycle(repo):
    c1 = candidate(repo, "c1", skill_body="one")
    view = repo.checkout("c1")
    assert Path(view.root) == repo.worktrees_dir / "_view-c1" and view.hash == c1.hash and view.commit == c1.commit
    assert repo.checkout("c1").root == view.root  # reused
    repo.remove_worktree("c1")
    assert not (repo.worktrees_dir / "c1").exists()
    assert git(repo, "rev-parse", "cand/c1").strip() == c1.commit  # the branch stays
    assert repo.new_candidate("c1", "seed") == repo.worktrees_dir / "c1"  # re-opened on its branch
    assert (repo.worktrees_dir / "c1" / "skills" / "c1").exists()


def test_gc_after_a_crash(repo):
    candidate(repo, "c1", skill_body="one")
    wt = repo.new_candidate("c2", "c1")
    shutil.rmtree(wt)
    (repo.worktrees_dir / "stray").mkdir()
    cleaned = repo.gc_worktrees()
    assert sorted(Path(p).name for p in cleaned) == ["c2", "stray"]
    listed = [Path(line.split()[0]).name for line in git(repo, "worktree", "list").splitlines()]
    assert "c2" not in listed and "c1" in listed  # worktree names (a commit hash may contain "c2")
    assert repo.new_candidate("c2", "c1").is_dir()  # the branch survives and can be re-opened
    assert repo.gc_worktrees() == []


def test_bad_ids_and_missing_worktree(repo):
    with pytest.raises(ProgramRepoError, match="bad program id"):
        repo.new_candidate("../escape", "seed")
    with pytest.raises(ProgramRepoError, match="call new_candidate first"):
        repo.commit_candidate("ghost", {}, "x")
    repo.new_candidate("c9", "seed")
    with pytest.raises(ProgramRepoError, match="differs from candidate id"):
        repo.commit_candidate("c9", {"id": "c8"}, "x")


def test_a_view_edited_in_place_is_restored_on_the_next_checkout(tmp_path):
    from evolver.programs import ProgramRepo

    seed = tmp_path / "seed"
    (seed / "skills" / "a").mkdir(parents=True)
    (seed / "skills" / "a" / "SKILL.md").write_text("---\nname: a\ndescription: d\n---\nbody\n")
    (seed / "prompt.md").write_text("p")
    repo = ProgramRepo(tmp_path / "ws")
    repo.init(seed, {"id": "seed"})
    view = Path(repo.checkout("seed").root)
    (view / "skills" / "a" / "SKILL.md").unlink()
    (view / "stray.txt").write_text("x")
    view = Path(repo.checkout("seed").root)
    assert (view / "skills" / "a" / "SKILL.md").exists() and not (view / "stray.txt").exists()


def test_the_seed_repository_appears_whole_and_a_half_made_one_is_rebuilt(tmp_path, seed_dir, capsys):
    store = tmp_path / "store"
    (store / "programs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--initial-branch=main"], cwd=store / "programs", check=True)
    (store / ".programs-building-99999").mkdir()  # a build that a killed run left behind
    seed = ProgramRepo(store).init(seed_dir, {"id": "seed", "model": "smollm2-135m"})
    assert seed.id == "seed" and git(ProgramRepo(store), "rev-list", "--count", "main").strip() == "1"
    assert [p.name for p in store.glob("programs.incomplete-*")] and not list(store.glob(".programs-building-*"))
    assert "creation was interrupted" in capsys.readouterr().err
    other = tmp_path / "other"
    (other / "programs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--initial-branch=dev"], cwd=other / "programs", check=True)
    subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=other / "programs", check=True)
    with pytest.raises(ProgramRepoError, match="not a program repository evolver made"):
        ProgramRepo(other).init(seed_dir, {"id": "seed"})  # someone's own repository is never moved


def test_a_git_write_that_fails_on_a_full_disk_says_so_even_when_git_does_not(repo, monkeypatch):
    """git reports a ref lock it could not write without errno's words; the free space says why."""
    from collections import namedtuple

    from evolver import programs
    from evolver.errors import RepoDamagedError
    with pytest.raises(ProgramRepoError) as plain:
        repo._git("tag", "-f", "x", "no-such-ref")
    assert not isinstance(plain.value, RepoDamagedError)  # room enough: git's own words
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(programs.shutil, "disk_usage", lambda path: usage(10 << 20, (10 << 20) - 4096, 4096))
    with pytest.raises(RepoDamagedError, match=r"(?s)No space left on device: 4096 bytes free.*disk is full"):
        repo._git("tag", "-f", "x", "no-such-ref")
