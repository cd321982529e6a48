"""`evolver export`: each format read back by `datasets`, and TRL's SFT trainer taking the SFT export as it is."""
import pytest

from evolver import Store, plugins
from prefdata import multi_step, single_step

datasets = pytest.importorskip("datasets")


def with_export(monkeypatch):
    """The `evolver` group with this plugin's command (the CLI adds plugin commands once, at import)."""
    from evolver.cli import cli

    monkeypatch.setenv("EVOLVER_PLUGINS", "preference")
    plugins.reset()
    plugins.hook().register_commands(cli=cli)
    return cli


def export(tmp_path, monkeypatch, *args):
    from click.testing import CliRunner

    monkeypatch.chdir(tmp_path)
    cli = with_export(monkeypatch)
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "store"), "export", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "store").mkdir()
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        store.add_episodes(single_step() + multi_step())
        store.add_episodes(single_step(run="r2"))
    return tmp_path


def load(path):
    kind = "parquet" if str(path).endswith(".parquet") else "json"
    return datasets.load_dataset(kind, data_files=str(path), split="train")


def test_sft_rows_are_conversations_ending_in_the_output(workspace, monkeypatch):
    out = workspace / "sft.jsonl"
    assert "5 sft rows" in export(workspace, monkeypatch, "--format", "sft", "--run", "r1", "--min-score", "1",
                                  "--out", str(out))
    ds = load(out)
    assert len(ds) == 5  # a0 and a1 winners (one step each), b0's winner (three steps)
    row = ds[0]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
    assert row["messages"][-1]["content"] == "aaaa" and row["task_id"] == "letters/train/a0"
    assert [r["messages"][-1]["content"] for r in ds if r["task_id"].endswith("b0")] == ["a!", "b!", "c!"]


def test_preference_rows_are_trls_conversational_pairs(workspace, monkeypatch):
    out = workspace / "pref.jsonl"
    export(workspace, monkeypatch, "--format", "preference", "--run", "r1", "--out", str(out))
    ds = load(out)
    assert {"prompt", "chosen", "rejected"} <= set(ds.column_names) and len(ds) == 5
    b0 = next(r for r in ds if r["task_id"].endswith("b0"))
    assert b0["chosen"] == [{"role": "assistant", "content": "b!"}]
    assert b0["rejected"] == [{"role": "assistant", "content": "x!"}] and b0["step"] == 1
    assert b0["prompt"][-1] == {"role": "user", "content": "after a"}


def test_one_trl_dpo_step_on_the_preference_export(workspace, monkeypatch, tiny_dir):
    trl = pytest.importorskip("trl")
    out = workspace / "pref.jsonl"
    export(workspace, monkeypatch, "--format", "preference", "--out", str(out))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    config = trl.DPOConfig(output_dir=str(workspace / "trl"), max_steps=1, per_device_train_batch_size=2,
                           learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True, bf16=False)
    trainer = trl.DPOTrainer(model=model, args=config, train_dataset=load(out),
                             processing_class=AutoTokenizer.from_pretrained(str(tiny_dir)))
    assert trainer.train().global_step == 1


def test_grpo_rows_are_prompts_with_scores_in_parquet_too(workspace, monkeypatch):
    pytest.importorskip("pyarrow")
    rows = {}
    for ext in ("jsonl", "parquet"):
        out = workspace / f"grpo.{ext}"
        export(workspace, monkeypatch, "--format", "grpo", "--split", "all", "--out", str(out))
        rows[ext] = load(out)
    ds = rows["parquet"]
    assert ds.column_names == rows["jsonl"].column_names and len(ds) == len(rows["jsonl"]) == 15
    assert {"prompt", "task_id", "answer", "score", "won", "reward_length"} <= set(ds.column_names)
    assert ds[0]["prompt"][0]["role"] == "system" and ds[0]["answer"] == "aaaa"
    assert sorted({r["score"] for r in ds}) == [0.0, 0.5, 1.0]
    assert [r["reward_length"] for r in ds][:2] == [0.5, None]  # every row has every reward column


def test_one_trl_sft_step_on_the_export(workspace, monkeypatch, tiny_dir):
    trl = pytest.importorskip("trl")
    out = workspace / "sft.jsonl"
    export(workspace, monkeypatch, "--format", "sft", "--out", str(out))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = trl.SFTConfig(output_dir=str(workspace / "trl"), max_steps=1, per_device_train_batch_size=2,
                           learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=1, use_cpu=True,
                           dataloader_num_workers=0, bf16=False)
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=load(out),
                             processing_class=AutoTokenizer.from_pretrained(str(tiny_dir)))
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0
    assert any(not (before[k] == v).all() for k, v in model.state_dict().items())


def test_an_unknown_suffix_is_an_error(workspace, monkeypatch):
    from click.testing import CliRunner

    r = CliRunner().invoke(with_export(monkeypatch), ["--store", str(workspace / "store"), "export", "--format",
                                                      "sft", "--out", str(workspace / "x.csv")])
    assert r.exit_code == 2 and "write .jsonl or .parquet" in r.output
