"""Hybrid retrieval on a fixed corpus: fusion, per-query normalisation, threshold, top-K, always-on."""
import pytest

from autoskill_helpers import AxisEmbedder, card, load_plugin
from evolver_autoskill.retrieval import HybridRetriever, RetrievalConfig, render_skills

GROUPS = {"email": ["email", "mail", "letter"], "code": ["python", "code", "script"],
          "food": ["recipe", "cooking", "ingredient", "dinner"]}
CORPUS = [
    card("formal-email", "Use when writing formal email to an office", "- Open with Dear."),
    card("budget-report", "Use when preparing a quarterly budget report", "- Put totals first."),
    card("python-style", "Use when writing python code", "- Follow PEP 8."),
    card("cooking", "Use when asked for a recipe", "- List the ingredients first."),
    card("be-concise", "Use for every answer", "- Be brief.", always_on=True),
]


def retriever(**cfg) -> HybridRetriever:
    return HybridRetriever(AxisEmbedder(GROUPS), RetrievalConfig(**cfg)).index(CORPUS)


def rel(result, name):
    return next(h.rel for h in result.hits if h.name == name)


def test_fusion_weighs_dense_against_bm25_by_lambda():
    # "letter" reaches formal-email only by meaning (same axis as "email", not a shared word);
    # "quarterly budget" reaches budget-report only by words (its vector is orthogonal).
    query = "quarterly budget letter"
    mixed = retriever(lam=0.6, eta=0.45).retrieve(query)
    assert rel(mixed, "formal-email") == pytest.approx(0.6) and rel(mixed, "budget-report") == pytest.approx(0.4)
    assert mixed.names == ["be-concise", "formal-email"]  # budget-report is below η
    assert {h.name: h.decision for h in mixed.hits}["budget-report"] == "below_eta"
    lexical = retriever(lam=0.0, eta=0.45).retrieve(query)
    assert lexical.names == ["be-concise", "budget-report"] and rel(lexical, "formal-email") == 0.0
    dense = retriever(lam=1.0, eta=0.45).retrieve(query)
    assert dense.names == ["be-concise", "formal-email"] and rel(dense, "budget-report") == 0.0


def test_scores_are_normalised_per_query():
    r = retriever()
    for query in ("python", "python python code script please write it"):
        result = r.retrieve(query)
        assert max(h.bm25_hat for h in result.hits) == pytest.approx(1.0)
        assert max(h.dense_hat for h in result.hits) == pytest.approx(1.0)
    # Raw scores differ between those queries; normalised ones are on one scale. A raw cosine of 2/3
    # is the best for this query, so it maps to 1, and 1/3 maps between the floor and the top.
    result = r.retrieve("dinner recipe python code email")
    hat = {h.name: h.dense_hat for h in result.hits}
    assert hat["python-style"] == pytest.approx(1.0) and hat["cooking"] == pytest.approx(1.0)
    assert hat["formal-email"] == pytest.approx((1 / 3 - 0.2) / (2 / 3 - 0.2), abs=1e-5)


def test_top_k_and_threshold_decide_and_every_decision_is_reported():
    result = retriever(top_k=2, eta=0.1).retrieve("dinner recipe python code email")
    decisions = {h.name: h.decision for h in result.hits}
    assert result.names == ["be-concise", "python-style", "cooking"]
    assert decisions == {"be-concise": "always_on", "python-style": "injected", "cooking": "injected",
                         "formal-email": "beyond_top_k", "budget-report": "below_eta"}
    strict = retriever(top_k=2, eta=0.99).retrieve("dinner recipe python code email")
    assert strict.names == ["be-concise", "python-style"]  # only a perfect match clears η = 0.99


def test_an_unrelated_query_gets_only_the_always_on_tier():
    result = retriever().retrieve("what is the weather tomorrow")
    assert result.names == ["be-concise"]
    assert all(h.rel == 0.0 for h in result.hits if h.name != "be-concise")
    assert "Apply a skill only when it matches" in render_skills(result.injected)


def test_bad_settings_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="use a value in"):
        RetrievalConfig(lam=1.5)
    with pytest.raises(ValueError, match="η must too"):
        RetrievalConfig(eta=-0.1)


def test_reindexing_embeds_only_changed_cards():
    emb = AxisEmbedder(GROUPS)
    r = HybridRetriever(emb, RetrievalConfig()).index(CORPUS)
    calls = emb.calls
    r.index(CORPUS + [card("new-one", "Use when writing a python script")])
    assert emb.calls == calls + 1  # one encode call, for the new card only
    assert r.retrieve("python script").names[1] in ("new-one", "python-style")


def test_select_skills_hook_lets_a_run_use_the_retriever_and_logs_its_decisions(tmp_path):
    from types import SimpleNamespace

    from evolver import plugins
    from evolver.config import Config
    from evolver.skills import load_skills
    from evolver.store import Store
    from evolver.types import Program, Task
    from evolver_autoskill import records
    from evolver_autoskill.card import write_card

    for c in CORPUS:
        write_card(tmp_path / "skills", c)
    skills = load_skills(tmp_path / "skills")
    load_plugin()
    program = Program(id="p1", commit="", root=str(tmp_path), hash="h1")
    task = Task(id="t1", benchmark="b", split="dev", category="writing", prompt="Write a python script")
    with Store(tmp_path / "s.duckdb") as store:
        off = SimpleNamespace(id="r0", store=store, config=Config())
        assert plugins.hook().select_skills(run=off, task=task, program=program, skills=skills, k=2) is None
        on = SimpleNamespace(id="r1", store=store, config=Config(plugins={"autoskill": {
            "retrieval_in_runs": True, "embedder": "hashing"}}))
        chosen = plugins.hook().select_skills(run=on, task=task, program=program, skills=skills, k=2)
        assert [s.name for s in chosen][:2] == ["be-concise", "python-style"]
        logged = records.retrievals(store, "run-r1")
        assert len(logged) == 1 and logged[0]["ref"] == "r1/p1/t1" and logged[0]["source"] == "run"
        assert {d["name"]: d["decision"] for d in logged[0]["decisions"]}["python-style"] == "injected"
        # Usage accounting joins the run's episodes: score with python-style injected vs without it.
        other = Task(id="t2", benchmark="b", split="dev", category="travel", prompt="Plan a weekend in Porto")
        assert "python-style" not in [s.name for s in plugins.hook().select_skills(
            run=on, task=other, program=program, skills=skills, k=2)]
        from evolver.types import Episode

        store.add_episodes([Episode(task=t, program_id="p1", program_hash="h1", model="m", seed=0, score=s,
                                    run_id="r1") for t, s in ((task, 1.0), (other, 0.25))])
        use = {r["skill"]: r for r in records.usage(store, "run-r1")}
        assert (use["python-style"]["injected"], use["python-style"]["with_score"]) == (1, 1.0)
        assert (use["python-style"]["without_n"], use["python-style"]["without_score"]) == (1, 0.25)
        assert use["be-concise"]["injected"] == 2 and use["be-concise"]["without_n"] == 0


def test_an_unavailable_dense_model_falls_back_clearly(tmp_path, capsys, monkeypatch):
    import evolver.embeddings as embeddings
    from evolver import load_embedder
    from evolver.embeddings import HashingEmbedder

    def missing(model):  # what sentence-transformers raises for a folder that is not there (import skipped)
        raise OSError(f"{model} is not a local folder and the hub is offline")
    monkeypatch.setattr(embeddings, "_load", missing)
    emb = load_embedder(str(tmp_path / "no-such-model"))
    assert isinstance(emb, HashingEmbedder)
    err = capsys.readouterr().err
    assert "unavailable" in err and "falling back to the hashing embedder" in err and "Fix:" in err
    vecs = emb.encode(["formal email", "formal email", "vegetarian recipe"])
    assert vecs[0] @ vecs[1] == pytest.approx(1.0) and abs(float(vecs[0] @ vecs[2])) < 0.5
