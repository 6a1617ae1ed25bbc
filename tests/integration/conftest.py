"""tests/integration: tests that start processes. Worker ranks are shared where they can be."""
import pytest

from milktea.distributed import Pool


@pytest.fixture(scope="session")
def ranks():
    """Gloo ranks kept up for the whole run, one pool per world size: `ranks(2).run(fn, ...)`
    is `launch(fn, 2, ...)` without starting processes (milktea.distributed.Pool). Tests of the
    launcher itself, and of anything that must start in a fresh process, use `launch`."""
    pools = {}

    def get(n: int) -> Pool:
        if n not in pools:
            pools[n] = Pool(n)
        return pools[n]

    yield get
    for pool in pools.values():
        pool.close()
