from evolver.checks import audit_leakage, check_harness_import, check_skill_files


def _program(root, skill_body="1. Look around first.", harness=None):
    (root / "skills" / "look").mkdir(parents=True)
    (root / "skills" / "look" / "SKILL.md").write_text(
        f"---\nname: look\ndescription: Use when you enter a new room.\n---\n{skill_body}\n")
    (root / "harness").mkdir()
    (root / "harness" / "harness.py").write_text(harness or
        "class Harness:\n    def __init__(self, p): pass\n    def start(self, t, o): pass\n"
        "    def next_call(self, s, o): pass\n    def parse(self, *a): pass\n    def observe(self, *a): pass\n")
    return root


def test_leakage_of_task_id_and_gold(tmp_path):
    root = _program(tmp_path / "a", "1. The answer to twx-easy/sorting/train/3 is 'banana split'.")
    assert "twx-easy/sorting/train/3" in audit_leakage(root, ["twx-easy/sorting/train/3"], [])
    assert "banana split" in audit_leakage(root, ["banana split"], [])
    assert audit_leakage(root, ["7"], []) == ""  # short strings are not evidence of a leak


def test_leakage_of_gold_sequence_but_not_single_actions(tmp_path):
    gold = ["open fridge", "take milk", "close fridge", "drink milk"]
    ok = _program(tmp_path / "ok", "1. Use open fridge when food is inside.")
    assert audit_leakage(ok, [], [gold]) == ""
    bad = _program(tmp_path / "bad", "1. open fridge\n2. take milk\n3. close fridge")
    assert "gold action sequence" in audit_leakage(bad, [], [gold])


def test_leak_already_in_parent_is_not_held_against_child(tmp_path):
    parent = _program(tmp_path / "p", "1. banana split")
    child = _program(tmp_path / "c", "1. banana split")
    assert audit_leakage(child, ["banana split"], [], parent) == ""


def test_malformed_skill_and_broken_harness_are_reasons(tmp_path):
    root = _program(tmp_path / "a")
    (root / "skills" / "bad").mkdir()
    (root / "skills" / "bad" / "SKILL.md").write_text("no front matter")
    assert check_skill_files(root).startswith("malformed skill")
    good = _program(tmp_path / "g")
    assert check_harness_import(good) == ""
    broken = _program(tmp_path / "b", harness="raise ValueError('nope')\n")
    assert "ValueError" in check_harness_import(broken)
    hang = _program(tmp_path / "h", harness="while True:\n    pass\n")
    assert "timed out" in check_harness_import(hang, timeout_s=2)


def test_a_short_answer_leaks_next_to_its_tasks_words_and_only_there(tmp_path):
    from evolver.types import Task
    task = Task("arith/3", "basic", "train", "arithmetic", prompt="Marta bakes 3 muffins and buys 4 more muffins "
                "at the bakery. How many muffins does Marta have?", gold="7")
    leak = _program(tmp_path / "leak", "1. When Marta bakes muffins, the answer is 7.")
    assert "leaks the gold answer '7' of task arith/3" in audit_leakage(leak, ["7"], [], tasks=[task])
    general = _program(tmp_path / "general", "1. Add the numbers: 3 + 4 = 7.\n2. Count muffins one by one.")
    assert audit_leakage(general, ["7"], [], tasks=[task]) == ""  # "7" far from two of the task's words
    parent = _program(tmp_path / "parent", "1. When Marta bakes muffins, the answer is 7.")
    assert audit_leakage(leak, [], [], parent_root=parent, tasks=[task]) == ""  # the parent had it already


def test_audit_parses_while_a_finaliser_parses_too(tmp_path):
    # A garbage collection during a parse may run a finaliser that parses as well (logging a traceback does);
    # on CPython 3.11 a bare ast.parse then fails with "AST constructor recursion depth mismatch".
    import ast
    import gc
    from pathlib import Path

    from evolver.checks import audit_harness_code, parse_python

    class Finalised:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            ast.parse("x = (1 + 2) * 3")

    source = (Path(__file__).parents[1] / "evolver" / "checks.py").read_text()
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "harness.py").write_text("def answer(task):\n    return task.gold\n")
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        for _ in range(10):
            for _ in range(50):
                Finalised()
            assert parse_python(source).body
        for _ in range(50):
            Finalised()
        assert audit_harness_code(tmp_path, None)
    finally:
        gc.set_threshold(*threshold)
    assert gc.isenabled()
