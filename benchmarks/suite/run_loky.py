"""loky through joblib: joblib's default process backend, the reference for the "scaler" backend."""

from __future__ import annotations

import joblib
import joblib_workload
from workloads import Runner, cpu_efficiency, cpu_work


def main() -> None:
    runner = Runner("loky (joblib)")
    spec = runner.spec
    joblib_workload.run("loky", runner.workers, 200)  # starts and keeps loky's reusable executor

    runner.run("joblib", lambda: joblib_workload.run("loky", runner.workers, runner.count("joblib")))

    def run_cpu() -> dict:
        iterations = spec["cpu_iterations"]
        with joblib.parallel_config(backend="loky", n_jobs=runner.workers):
            return cpu_efficiency(spec, lambda: joblib.Parallel()(
                joblib.delayed(cpu_work)(iterations) for _ in range(spec["cpu_tasks"])
            ))

    runner.run("cpu", run_cpu)


if __name__ == "__main__":
    main()
