"""registers on a fake CuPy backend: the persistent softmax of every N is compiled in one batch of
modules, a module per N, that the backend compiles at once in threads (one module of every N was
6.1-7.5 s of NVRTC on a fresh H200, issue 13), and the report keeps the plan's order."""

from __future__ import annotations

from types import SimpleNamespace

from calib.calibrations import registers


class FakeGpu:
    def __init__(self):
        self.batches, self.modules = [], {}
        self.cp = SimpleNamespace()

    def compile_modules(self, specs, *, max_threads=16):
        self.batches.append([key for key, *_ in specs])
        self.max_threads = max_threads
        for key, source, names in specs:
            assert source == "persistent.cu"
            self.modules[key] = list(names)

    def module(self, key, source, names):
        assert self.modules[key] == list(names), "compiled outside the batch"

        def function(name):
            n = int(name.split("<")[1].rstrip(">"))
            return SimpleNamespace(attributes={"num_regs": min(255, 16 + n), "local_size_bytes": 4 * max(0, n - 239)})

        return SimpleNamespace(get_function=function)


def test_every_n_compiles_in_one_batch_a_module_each_and_reports_in_plan_order():
    gpu = FakeGpu()
    plan = registers.SUITES["quick"]
    report = registers.compile_report(gpu, plan)
    assert gpu.batches == [[f"registers-{n}" for n in plan]] and gpu.max_threads == registers.COMPILE_THREADS
    assert all(names == [f"persistent_softmax<{n}>"] for n, names in zip(plan, gpu.modules.values()))
    assert [r["buffered"] for r in report] == plan
    assert report[0] == {"buffered": 2, "registers": 18, "spill_bytes": 0}
    assert report[-1] == {"buffered": 256, "registers": 255, "spill_bytes": 68}
