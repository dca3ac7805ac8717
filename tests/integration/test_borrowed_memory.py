"""Reading what another real process lends (lent_objects.py, borrowed_memory.py): process_vm_readv for real."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterator

import pytest

from scaler.protocol import data_messages as d
from scaler.protocol import stored_payload
from scaler.store.borrowed_memory import LoanUnreadable, check, read_parts, read_payload
from tests.conftest import child_python_environment

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process_vm_readv is Linux only"),
]

MB = 1 << 20

# A lender: lends (a, b"x" * 3 MB, b) as a client lends a call's arguments, prints the loan, then lets it go
# when told ("let go") and exits when its stdin closes.
LENDER = """
import json, os, sys
from scaler.protocol import stored_payload
from scaler.store.lent_objects import LentObjects
value = (b"first" * 300_000, "middle", os.urandom(3 * 2**20))
payload = stored_payload.prepare(value)
lent = LentObjects()
assert LentObjects.lendable(payload) and len(payload.buffers) == 2
loan = lent.lend(b"object", payload, os.getpid())
print(json.dumps({"pid": loan.pid, "header": loan.header.hex(), "ranges": loan.ranges,
                  "cookie_address": loan.cookie_address, "cookie": loan.cookie.hex(), "size": payload.size,
                  "value": [value[0].hex()[:64], value[2].hex()]}), flush=True)
for line in sys.stdin:
    if line.strip() == "let go":
        lent.let_go([b"object"])
        print("gone", flush=True)
"""


@pytest.fixture
def lender() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(
        [sys.executable, "-c", LENDER], env=child_python_environment(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait(30)


def loan_of(lender: subprocess.Popen) -> tuple[d.MemoryLoan, int, list[str]]:
    assert lender.stdout is not None
    told = json.loads(lender.stdout.readline())
    loan = d.MemoryLoan(
        told["pid"], bytes.fromhex(told["header"]), tuple(tuple(entry) for entry in told["ranges"]),
        told["cookie_address"], bytes.fromhex(told["cookie"]),
    )
    return loan, told["size"], told["value"]


def test_a_reader_copies_the_lenders_bytes_into_its_own_and_gets_the_value_back(lender) -> None:
    loan, size, expected = loan_of(lender)
    check(loan)
    parts = read_parts(loan)
    assert all(type(part) is bytes for part in parts)
    layout = stored_payload.read_layout(loan.header, size)
    first, middle, last = stored_payload.read_parts(layout, parts[0], parts[1:])
    assert first.hex()[:64] == expected[0] and len(first) == 1_500_000
    assert middle == "middle" and last.hex() == expected[1]
    # The whole payload, as the store sends it to a remote reader: the same object.
    assert stored_payload.read(read_payload(loan, size))[2] == last


def test_once_the_lender_lets_go_a_reader_is_told_so_instead_of_reading_garbage(lender) -> None:
    loan, size, _ = loan_of(lender)
    assert lender.stdin is not None and lender.stdout is not None
    lender.stdin.write("let go\n")
    lender.stdin.flush()
    assert lender.stdout.readline().strip() == "gone"
    for read in (lambda: check(loan), lambda: read_parts(loan), lambda: read_payload(loan, size)):
        with pytest.raises(LoanUnreadable, match="no longer lends"):
            read()


def test_a_lender_that_exited_cannot_be_read(lender) -> None:
    loan, _, _ = loan_of(lender)
    lender.kill()
    lender.wait(30)
    with pytest.raises(LoanUnreadable, match="cannot read the memory of process"):
        read_parts(loan)


def test_a_loan_whose_ranges_are_not_its_headers_parts_is_refused(lender) -> None:
    from scaler.store.borrowed_memory import loan_layout

    loan, size, _ = loan_of(lender)
    shorter = d.MemoryLoan(loan.pid, loan.header, loan.ranges[:-1], loan.cookie_address, loan.cookie)
    with pytest.raises(stored_payload.StoredPayloadError):
        loan_layout(shorter, size)
    loan_layout(loan, size)
