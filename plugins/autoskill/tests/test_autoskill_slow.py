"""The product defaults for real: all-MiniLM-L6-v2 from its wheel, and `evolver serve` in front of the
embedded SmolLM2 (run with ``pytest -m slow plugins/autoskill``)."""
import pytest

from autoskill_helpers import card

pytestmark = pytest.mark.slow

BANK = [card("formal-email", "Use when writing an email to a landlord or an office", "- Open with 'Dear'."),
        card("python-style", "Use when writing python code", "- Add type hints."),
        card("vegetarian-cooking", "Use when asked for recipes or meal ideas", "- No meat or fish."),
        card("trip-planning", "Use when planning a holiday itinerary", "- Give a day-by-day plan.")]


def test_minilm_retrieves_by_meaning_where_words_do_not_overlap():
    from evolver import load_embedder
    from evolver.embeddings import SentenceEmbedder
    from evolver_autoskill.retrieval import HybridRetriever

    emb = load_embedder()
    assert isinstance(emb, SentenceEmbedder) and emb.dim == 384  # the real model, not the fallback
    r = HybridRetriever(emb).index(BANK)
    assert r.retrieve("what should I cook tonight without meat?").names == ["vegetarian-cooking"]
    assert r.retrieve("a letter to my housing agency about mould").names[0] == "formal-email"
    assert r.retrieve("three days in Rome, what do we visit?").names == ["trip-planning"]
    assert r.retrieve("how many moons does Jupiter have").names == []


def test_serve_in_front_of_the_embedded_model(tmp_path):
    from openai import OpenAI

    from evolver_transformers.backend import TransformersBackend
    from evolver.store import Store
    from evolver_autoskill import records
    from evolver_autoskill.bank import SkillBank
    from evolver_autoskill.serve import Server, build_app
    from evolver_autoskill.service import AutoSkillService

    SkillBank(tmp_path / "autoskill", "ana").add(BANK[0], ["seed"])
    backend = TransformersBackend()
    with Store(tmp_path / "evolver.duckdb") as store:
        service = AutoSkillService(tmp_path / "autoskill", store)
        server = Server(build_app(service, backend, "smollm2"), "127.0.0.1", 0).start()
        try:
            client = OpenAI(base_url=server.url, api_key="unused")
            resp = client.chat.completions.create(model="smollm2", user="ana", max_tokens=24, messages=[
                {"role": "user", "content": "Write an email to my landlord about the broken heating."}])
            assert resp.choices[0].message.content.strip() and resp.usage.completion_tokens > 0
            assert resp.model_extra["evolver"]["skills"] == ["formal-email"]
        finally:
            server.stop()
            service.close()
            backend.close()
        assert records.conversations(store, "ana")[0]["response"] == resp.choices[0].message.content


def test_a_missing_sentence_transformers_folder_falls_back_to_hashing(tmp_path, capsys):
    from evolver import load_embedder
    from evolver.embeddings import HashingEmbedder

    assert isinstance(load_embedder(str(tmp_path / "nothing-here")), HashingEmbedder)
    assert "falling back to the hashing embedder" in capsys.readouterr().err
