"""The proposer's answer: which harness it copied, its hypothesis, the mechanism it changes, and the new code.

Format (the same in single-call and agentic mode)::

    PARENT: <id of the candidate whose harness you copied>      (optional: the iteration's parent)
    HYPOTHESIS: <what goes wrong now, seen in which traces, and why the change fixes it>
    MECHANISM: <context | tools | parsing | memory | stopping | other>: <what changes in it>
    ```python
    <the complete new harness/harness.py>
    ```

Checks made here, before the core spends anything on the candidate: the code parses, defines ``class
Harness`` with the four interface methods, and changes a mechanism, not only constants (Meta-Harness's
proposals each change a mechanism; tuning a number is not a harness search).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

MECHANISMS = ("context", "tools", "parsing", "memory", "stopping", "other")
INTERFACE = ("start", "next_call", "parse", "observe")
FORMAT = ("Answer in exactly this format:\nPARENT: <id of the candidate whose harness you copied>\n"
          "HYPOTHESIS: <what goes wrong now, seen in which traces, and why your change fixes it>\n"
          f"MECHANISM: <one of {', '.join(MECHANISMS)}>: <what changes in it>\n"
          "```python\n<the complete new harness/harness.py>\n```")


@dataclass
class Answer:
    parent: str = ""
    hypothesis: str = ""
    mechanism: str = ""
    code: str = ""
    problem: str = ""  # why it cannot be used ('' when it can)
    repairable: bool = False  # a problem the model may fix in one more call (bad syntax, missing method)


def _field(text: str, key: str) -> str:
    m = re.search(rf"^\W*{key}\W*:\s*(.+)$", text, flags=re.IGNORECASE | re.MULTILINE)
    return m.group(1).strip() if m else ""


def extract_code(text: str) -> str:
    """The last fenced block that defines ``class Harness`` (else the last fenced block)."""
    blocks = re.findall(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", text, flags=re.DOTALL | re.IGNORECASE)
    with_class = [b for b in blocks if re.search(r"^class\s+Harness\b", b, flags=re.MULTILINE)]
    chosen = (with_class or blocks or [""])[-1]
    return chosen.strip("\n") + "\n" if chosen.strip() else ""


def parse_answer(text: str, parent_code: str, allow_constant_changes: bool = False) -> Answer:
    ans = Answer(parent=_field(text, "PARENT").split()[0].strip(".,;`") if _field(text, "PARENT") else "",
                 hypothesis=_field(text, "HYPOTHESIS")[:1000], mechanism=_field(text, "MECHANISM")[:300],
                 code=extract_code(text))
    if not ans.code:
        ans.problem = "the answer has no ```python block with the new harness/harness.py"
        ans.repairable = True
        return ans
    problem = code_problem(ans.code)
    if problem:
        ans.problem, ans.repairable = problem, True
        return ans
    if not ans.hypothesis:
        ans.problem = "the answer states no HYPOTHESIS"
        ans.repairable = True
        return ans
    if not allow_constant_changes and only_constants_changed(parent_code, ans.code):
        ans.problem = "the code changes only constants, not a mechanism"
        ans.repairable = True
    return ans


def code_problem(code: str) -> str:
    """Why ``code`` cannot be a harness module ('' when it can): syntax, or the class and its methods."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return f"the code does not parse: {exc.msg} at line {exc.lineno}: {(exc.text or '').strip()[:120]}"
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Harness"), None)
    if cls is None:
        return "the code defines no top-level class Harness"
    methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = [m for m in INTERFACE if m not in methods]
    if missing and not cls.bases:  # a subclass may inherit them
        return f"class Harness lacks the interface methods {', '.join(missing)}"
    return ""


def only_constants_changed(before: str, after: str) -> bool:
    """True when ``after`` differs from ``before`` only in literal values (numbers, strings, booleans)."""
    try:
        a, b = ast.parse(before), ast.parse(after)
    except SyntaxError:
        return False

    class Blank(ast.NodeTransformer):
        def visit_Constant(self, node):
            return ast.copy_location(ast.Constant(value=None), node)

        def visit_Expr(self, node):  # docstrings and comments-as-strings are not mechanisms either
            return None if isinstance(node.value, ast.Constant) else self.generic_visit(node)
    same_shape = ast.dump(Blank().visit(a)) == ast.dump(Blank().visit(b))
    return same_shape and before.strip() != after.strip()
