import pytest

from evolver.config import SPLIT_TASKS, load_config, sized
from evolver.errors import ConfigError


def test_defaults_and_overrides(tmp_path):
    path = tmp_path / "evolver.toml"
    path.write_text('benchmark = "basic"\n[loop]\niterations = 7\n[roles.proposer]\nbackend = "openai"\nmodel = "x"\n')
    cfg = load_config(path, ["loop.iterations=2", "roles.executor.options={max_batch = 4}"])
    assert cfg.benchmark == "basic" and cfg.loop.iterations == 2
    assert cfg.role("proposer").backend == "openai" and cfg.role("judge").backend == "auto"
    assert cfg.role("executor").options == {"max_batch": 4}


def test_split_sizes_left_unset_come_to_the_same_totals_whatever_the_categories():
    loop = load_config(None, ["benchmark=basic"], base={}).loop
    assert (loop.train_per_category, loop.dev_per_category, loop.test_per_category) == (None, None, None)
    for categories, sizes in [(6, (1, 4, 6)), (1, (6, 24, 36)), (7, (1, 4, 6)), (4, (2, 6, 9)), (0, (6, 24, 36)),
                              (30, (1, 1, 2))]:
        got = sized(loop, categories)
        assert (got.train_per_category, got.dev_per_category, got.test_per_category) == sizes, categories
        if categories:  # never fewer tasks than the totals
            assert all(getattr(got, k) * categories >= total for k, total in SPLIT_TASKS.items())
    mine = sized(load_config(None, ["loop.dev_per_category=2"], base={}).loop, 1)
    assert (mine.dev_per_category, mine.test_per_category) == (2, 36)  # what a user set stays as set


@pytest.mark.parametrize("override, expected", [
    ("loop.iteratons=2", "did you mean 'loop.iterations'"),
    ("bechmark=x", "did you mean 'benchmark'"),
    ("loop.iterations=many", "loop.iterations"),
    ("roles.critic.backend=x", "unknown role"),
    ("nokey", "KEY=VALUE"),
])
def test_bad_config_says_how_to_fix(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(None, [override])


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "other.toml")


def test_switching_benchmark_drops_the_other_benchmarks_options_but_keeps_the_users(tmp_path):
    from evolver.config import Config

    assert load_config(None).benchmark_options == {"suite": "twx-easy"}  # the default profile is twx's
    assert load_config(None, ["benchmark=basic"]).benchmark_options == {}
    assert Config(benchmark="basic").benchmark_options == {}
    path = tmp_path / "evolver.toml"
    path.write_text('benchmark = "twx"\nbenchmark_options = { suite = "twx-hard", max_steps = 9 }\n')
    assert load_config(path, ["benchmark=twx"]).benchmark_options == {"suite": "twx-hard", "max_steps": 9}
    assert load_config(path, ["benchmark_options.max_steps=3"]).benchmark_options == {"suite": "twx-hard",
                                                                                       "max_steps": 3}
    assert load_config(path, ["benchmark=basic"]).benchmark_options == {}
    # options given as overrides hold, before or after the switch
    for overrides in (["benchmark_options.categories=['units']", "benchmark=basic"],
                      ["benchmark=basic", "benchmark_options.categories=['units']"]):
        assert load_config(path, overrides).benchmark_options == {"categories": ["units"]}
    # a resumed run's recorded config (base) is kept unless the benchmark changes
    base = {"benchmark": "basic", "benchmark_options": {"categories": ["units"]}}
    assert load_config(None, ["benchmark=basic"], base=base).benchmark_options == {"categories": ["units"]}


def test_plugin_options_name_the_key_suggest_the_nearest_and_list_the_known_ones():
    from pydantic import BaseModel, ConfigDict

    from evolver import plugin_options

    class Opts(BaseModel):
        model_config = ConfigDict(extra="forbid")
        samples: int = 4
        temperature: float = 1.0
    assert plugin_options(Opts, None, "mine").samples == 4
    assert plugin_options(Opts, {"samples": 8}, "mine").samples == 8
    with pytest.raises(ConfigError) as err:
        plugin_options(Opts, {"sample": 8, "temperature": "hot"}, "mine")
    text = str(err.value)
    assert text.startswith("[plugins.mine]: ") and "plugins.mine.sample: Extra inputs" in text
    assert "did you mean 'samples'?" in text and "plugins.mine.temperature:" in text
    assert text.endswith("Known keys: samples, temperature")
