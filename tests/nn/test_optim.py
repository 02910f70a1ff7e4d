import torch

from fedclust.nn.optim import CpuAdam


def test_cpu_adam_steps_as_adam_without_the_graph_capture_check_on_the_cpu(monkeypatch):
    calls = []
    real = torch.optim.Adam._accelerator_graph_capture_health_check
    monkeypatch.setattr(torch.optim.Adam, "_accelerator_graph_capture_health_check",
                        lambda self: calls.append(1) or real(self))
    steps = {}
    for make in (torch.optim.Adam, CpuAdam):
        p = torch.nn.Parameter(torch.arange(4.0))
        optimizer = make([p], lr=0.1, foreach=True)
        for _ in range(3):
            p.grad = p.detach() ** 2
            optimizer.step()
        steps[make] = p.detach()
    assert torch.equal(steps[CpuAdam], steps[torch.optim.Adam])
    assert len(calls) == 3  # torch's Adam checked at each of its steps, CpuAdam at none
