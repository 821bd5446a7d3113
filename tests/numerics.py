"""Float comparisons that hold on any machine, thread count or process layout: compare what
is well conditioned, with tolerances derived from the computation (imported by the tests)."""

import torch

# fp32 sums of a gradient in another order (micro-batches, ranks, chunks, packing) differ by
# ~3e-6 of the tensor's largest entry on the tiny model
GRAD_NOISE = 1e-5


def grad_atol(grad: torch.Tensor) -> float:
    """The absolute float noise of `grad` recomputed in another summation order."""
    return GRAD_NOISE * float(grad.abs().max())


def assert_same_gradient(got: torch.Tensor, want: torch.Tensor, name: str = "") -> None:
    """Gradients equal up to summation-order noise: `GRAD_NOISE` of the tensor's scale, and
    1e-4 relative (a gradient entry near 0 carries the same absolute noise as a large one)."""
    torch.testing.assert_close(got, want, atol=grad_atol(want), rtol=1e-4, msg=name)


def assert_same_first_adamw_step(
    got: torch.Tensor,
    want: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    grad_atol: float,
    weight_atol: float = 1e-6,
    name: str = "",
) -> None:
    """Weights after one AdamW step from the same start, taken from gradients that agree to
    about `grad_atol` (`grad`: one side's gradient, as the optimizer saw it).

    AdamW's first step moves a weight by lr * g / (|g| + eps) (bias-corrected moments of one
    gradient; weight decay acts alike on both sides). Where |g| > 100 grad_atol the gradient's
    float noise can neither flip that direction nor move it measurably, so the weights agree to
    `weight_atol`. Where g is within noise of 0 the step is any value in [-lr, lr] and float
    noise picks it: there the two sides can only be held to 2 lr apart.

    >>> g = torch.tensor([1e-2, 1e-9, -3e-3])
    >>> assert_same_first_adamw_step(torch.tensor([0.999, 1.0009, 1.003]), torch.tensor([0.999, 0.9991, 1.003]),
    ...                              g, lr=1e-3, grad_atol=1e-6)
    """
    diff = (got.detach().float() - want.detach().float()).abs()
    determined = grad.abs() > 100 * grad_atol
    worst = float(diff[determined].max()) if determined.any() else 0.0
    assert worst <= weight_atol, f"{name}: weights differ by {worst:.3g} where |grad| > {100 * grad_atol:g}"
    bound = 2 * lr + weight_atol
    assert float(diff.max()) <= bound, f"{name}: weights differ by {float(diff.max()):.3g} > 2 lr"
