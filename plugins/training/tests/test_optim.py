"""The optimiser step every trainer takes (``evolver_training.Optimiser``): the schedule, exact
accumulation over micro-batches, clipping, and a step that trains nothing when asked not to."""
import pytest

torch = pytest.importorskip("torch")

from evolver_training import Optimiser, lr_at  # noqa: E402


def model_and_data(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    return model, x, y


def test_micro_batches_each_their_share_step_as_the_whole_batch_does():
    whole, x, y = model_and_data()
    split, _, _ = model_and_data()
    a = Optimiser(whole.parameters(), lr=0.1, max_grad_norm=100.0)
    b = Optimiser(split.parameters(), lr=0.1, max_grad_norm=100.0)
    a.begin()
    ((whole(x) - y) ** 2).sum().div(8).backward()
    ga = a.finish()
    b.begin()
    for i in range(0, 8, 2):  # four micro-batches, each loss its share of the batch
        ((split(x[i:i + 2]) - y[i:i + 2]) ** 2).sum().div(8).backward()
    gb = b.finish()
    assert ga == pytest.approx(gb, rel=1e-5)
    for p, q in zip(whole.parameters(), split.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_the_gradient_norm_is_clipped_and_reported_before_clipping():
    model, x, y = model_and_data()
    opt = Optimiser(model.parameters(), lr=0.0, max_grad_norm=1e-3)
    opt.begin()
    (1000 * ((model(x) - y) ** 2).sum()).backward()
    norm = opt.finish()
    clipped = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    assert norm > 1.0 and float(clipped) == pytest.approx(1e-3, rel=1e-3)


def test_begin_sets_the_scheduled_rate_and_finish_can_hold_the_weights():
    model, x, y = model_and_data()
    opt = Optimiser(model.parameters(), lr=1e-2, schedule="linear", warmup=0.25, total=8)
    assert [round(opt.begin(n), 6) for n in (1, 2, 3, 8)] == \
        [round(lr_at(n, 8, 1e-2, 0.25, "linear"), 6) for n in (1, 2, 3, 8)]
    assert opt.param_groups[0]["lr"] == pytest.approx(lr_at(8, 8, 1e-2, 0.25, "linear"))
    assert Optimiser(model.parameters(), lr=3e-4).begin(5) == 3e-4  # no total: the constant rate
    before = [p.detach().clone() for p in model.parameters()]
    opt.begin(3)
    ((model(x) - y) ** 2).sum().backward()
    opt.finish(step=False)  # a warm-up that trains something else: gradients clipped, weights held
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))
    opt.finish()
    assert not all(torch.equal(p, q) for p, q in zip(before, model.parameters()))
