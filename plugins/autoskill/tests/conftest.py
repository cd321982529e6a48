"""Every AutoSkill test runs with the plugin loaded, as an installed one is: a store opened in a test
then gets the plugin's tables from its migrations (the suite's EVOLVER_PLUGINS leaves it out)."""
import pytest

from autoskill_helpers import load_plugin


@pytest.fixture(autouse=True)
def autoskill_loaded():
    load_plugin()
