"""Query rewriting keeps the task anchor across turns and replaces it on a topic change."""
from autoskill_helpers import AxisEmbedder
from evolver.backends.scripted import ScriptedBackend
from evolver_autoskill.rewrite import LLMRewriter, RuleRewriter

EMB = AxisEmbedder({"email": ["email", "landlord", "heating", "letter"], "code": ["python", "function", "list"],
                    "food": ["recipe", "dinner", "vegetarian"]})


def conv(*turns):
    msgs = []
    for i, t in enumerate(turns):
        msgs += [{"role": "user", "content": t}, {"role": "assistant", "content": f"ANSWER{i} about python recipes"}]
    return msgs[:-1]  # the conversation ends on the user's turn


def test_a_style_only_turn_keeps_the_anchor_and_adds_the_constraint():
    r = RuleRewriter(EMB).rewrite(conv("Write an email to my landlord about the broken heating", "shorter please"))
    assert r.query.startswith("Write an email to my landlord") and r.query.endswith("shorter please")
    assert r.anchor_turn == 0 and not r.topic_changed


def test_a_durable_constraint_far_from_the_task_in_words_keeps_the_anchor():
    r = RuleRewriter(EMB).rewrite(conv("Write an email to my landlord about the heating",
                                       "Never use exclamation marks and always sign off with my first name"))
    assert r.anchor_turn == 0 and r.query.startswith("Write an email to my landlord")


def test_a_continuation_on_topic_keeps_the_anchor():
    r = RuleRewriter(EMB).rewrite(conv("Write an email to my landlord about the heating",
                                       "Also mention the heating has been broken since Monday in the letter"))
    assert r.anchor_turn == 0 and "landlord" in r.query and "Monday" in r.query


def test_a_topic_change_replaces_the_anchor():
    r = RuleRewriter(EMB).rewrite(conv("Write an email to my landlord about the heating", "make it formal",
                                       "Now give me a vegetarian dinner recipe for four people"))
    assert r.topic_changed and r.anchor_turn == 2
    assert r.query == "Now give me a vegetarian dinner recipe for four people"


def test_the_query_never_contains_the_assistants_words():
    r = RuleRewriter(EMB).rewrite(conv("Write an email to my landlord", "more polite"))
    assert "ANSWER" not in r.query and "python" not in r.query


def test_llm_rewriter_uses_the_model_and_falls_back_on_an_empty_answer():
    backend = ScriptedBackend(["landlord heating email, formal tone", ""])
    rw = LLMRewriter(backend, RuleRewriter(EMB))
    assert rw.rewrite(conv("Write an email to my landlord", "formal")).query == "landlord heating email, formal tone"
    assert "User turns" in backend.calls[0].messages[0].content and "ANSWER" not in backend.calls[0].messages[0].content
    assert rw.rewrite(conv("Write an email to my landlord", "formal")).query == "Write an email to my landlord formal"
