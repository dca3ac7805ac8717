"""Asynchronous use: `Client(..., asynchronous=True)`, `LocalCluster(..., asynchronous=True)`, and `await` on
every future, the native ScalerFuture included, without blocking the event loop."""

from __future__ import annotations

import asyncio
import time
from operator import add, mul
from typing import Iterator

import pytest

pytest.importorskip("dask")

from scaler import Client as NativeClient  # noqa: E402
from scaler.compat.dask.distributed import Client, LocalCluster, as_completed, wait  # noqa: E402

WAIT_SECONDS = 60


def slow_identity(x: int, delay: float) -> int:
    time.sleep(delay)
    return x


def div(x: float, y: float) -> float:
    return x / y


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Started and closed asynchronously: `await LocalCluster(..., asynchronous=True)`, `await cluster.close()`."""

    async def start() -> LocalCluster:
        return await LocalCluster(n_workers=2, threads_per_worker=1, asynchronous=True)

    async def close(local: LocalCluster) -> None:
        await local.close()

    local = asyncio.run(start())
    try:
        assert local.status == "running"
        yield local
    finally:
        asyncio.run(close(local))
    assert local.status == "closed"


def run(coroutine: object) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, WAIT_SECONDS))  # type: ignore[arg-type]


def test_native_future_is_awaitable_without_blocking_the_loop(cluster: LocalCluster) -> None:
    async def main() -> tuple[int, int]:
        with NativeClient(address=cluster.scheduler_address) as client:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            ticking = asyncio.create_task(ticker())
            value = await client.submit(slow_identity, 5, 0.5)
            ticks_while_waiting = ticks
            ticking.cancel()
            with pytest.raises(ZeroDivisionError):
                await client.submit(div, 1, 0)
            return value, ticks_while_waiting

    value, ticks = run(main())  # type: ignore[misc]
    assert value == 5
    assert ticks > 1  # the loop ran other coroutines while the task ran


def test_canceling_the_await_leaves_the_task(cluster: LocalCluster) -> None:
    async def main() -> int:
        with NativeClient(address=cluster.scheduler_address) as client:
            future = client.submit(slow_identity, 7, 0.5)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(future, 0.01)  # cancels the awaiting, not the task
            assert not future.cancelled()
            return await future

    assert run(main()) == 7


def test_async_client(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with Client(cluster, asynchronous=True) as client:
            assert await client.submit(add, 1, 2) == 3
            futures = client.map(mul, range(4), range(4))
            assert await client.gather(futures) == [0, 1, 4, 9]
            [scattered] = await client.scatter([10])
            assert await client.submit(add, scattered, 1) == 11
            done, not_done = await wait(futures)
            assert done == set(futures) and not not_done
            seen = [await future async for future in as_completed(futures)]
            assert sorted(seen) == [0, 1, 4, 9]
            seen_with_results = [result async for _, result in as_completed(futures, with_results=True)]
            assert sorted(seen_with_results) == [0, 1, 4, 9]
        assert client.status == "closed"

    run(main())


def test_awaited_client_and_explicit_close(cluster: LocalCluster) -> None:
    async def main() -> None:
        client = await Client(cluster.scheduler_address, asynchronous=True)
        try:
            assert await client.submit(add, 2, 2) == 4
        finally:
            await client.close()
        assert client.status == "closed"

    run(main())
