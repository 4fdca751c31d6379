"""The demo web shop's OLTP database: customers, products and inventory, the CDC sources.

The same schema is created in SQLite and PostgreSQL. Product ids are those of the clickstream
workload (`lakelog.demo.workload`: ``p-00000`` ... ``p-01999`` by default), so the changelogs
join the event topics. SQLite has no exact decimal and no timestamp type, so it stores prices as
text (``'12.50'``) and timestamps as UTC text (``'2026-01-05 08:00:00.000000'``); the declared
`SourceTable` types say what they are.

`mutate` is a deterministic workload of row changes that covers what a capture must get right:
inserts, updates, deletes, a key updated several times in one transaction, a deleted key
inserted again (in the same or a later transaction) and an update of a primary key.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

from lakelog.cdc.source_tables import SourceColumn, SourceTable
from lakelog.demo.sessions import ADJECTIVES, NOUNS
from lakelog.errors import ConfigError

Dialect = Literal["sqlite", "postgres"]

CUSTOMERS = SourceTable(
    "customers",
    (
        SourceColumn("customer_id", "bigint"),
        SourceColumn("name", "text"),
        SourceColumn("email", "text"),
        SourceColumn("country", "text"),
        SourceColumn("updated_at", "timestamp"),
    ),
    ("customer_id",),
)
PRODUCTS = SourceTable(
    "products",
    (
        SourceColumn("product_id", "text"),
        SourceColumn("name", "text"),
        SourceColumn("category", "text"),
        SourceColumn("price", "numeric", precision=10, scale=2),
        SourceColumn("updated_at", "timestamp"),
    ),
    ("product_id",),
)
INVENTORY = SourceTable(
    "inventory",
    (
        SourceColumn("product_id", "text"),
        SourceColumn("warehouse", "text"),
        SourceColumn("quantity", "integer"),
        SourceColumn("updated_at", "timestamp"),
    ),
    ("product_id",),
)
TABLES = (CUSTOMERS, PRODUCTS, INVENTORY)

DDL: dict[str, tuple[str, ...]] = {
    "postgres": (
        "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL,"
        " email text, country text, updated_at timestamp NOT NULL)",
        "CREATE TABLE IF NOT EXISTS products (product_id text PRIMARY KEY, name text NOT NULL,"
        " category text, price numeric(10,2), updated_at timestamp NOT NULL)",
        "CREATE TABLE IF NOT EXISTS inventory (product_id text PRIMARY KEY, warehouse text,"
        " quantity integer, updated_at timestamp NOT NULL)",
    ),
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS customers (customer_id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " email TEXT, country TEXT, updated_at TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS products (product_id TEXT NOT NULL PRIMARY KEY,"
        " name TEXT NOT NULL, category TEXT, price TEXT, updated_at TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS inventory (product_id TEXT NOT NULL PRIMARY KEY,"
        " warehouse TEXT, quantity INTEGER, updated_at TEXT NOT NULL)",
    ),
}

START = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)  # the clickstream workload's start
FIRST = ("Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim")
LAST = ("Lovelace", "Turing", "Hopper", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson")
COUNTRIES = ("DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "JP")
WAREHOUSES = ("BER-1", "AMS-1", "LON-2", "NYC-1")


@dataclass(frozen=True)
class Mutations:
    """What `mutate` did (row changes by kind; a key update counts as an update)."""

    inserts: int
    updates: int
    deletes: int
    transactions: int


def product_id(i: int) -> str:
    return f"p-{i:05d}"


def _check(dialect: str) -> None:
    if dialect not in DDL:
        raise ConfigError(f"oltp: unknown dialect {dialect!r}; use 'sqlite' or 'postgres'")


def _param(dialect: str, value: Any) -> Any:
    if dialect == "sqlite":
        if isinstance(value, Decimal):
            return f"{value:.2f}"
        if isinstance(value, datetime):
            return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    elif isinstance(value, datetime):  # timestamp without time zone holds UTC
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _execute(conn: Any, dialect: str, query: str, params: Sequence[Any] = ()) -> None:
    if dialect == "postgres":
        query = query.replace("?", "%s")
    conn.execute(query, tuple(_param(dialect, p) for p in params))


@contextmanager
def _transaction(conn: Any, dialect: str) -> Iterator[None]:
    if dialect == "postgres":
        with conn.transaction():
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def create_schema(conn: Any, dialect: Dialect) -> None:
    """Create the three tables (if missing) on a sqlite3 or psycopg connection.

    A SQLite database is switched to WAL mode, so that capture can read while the shop writes.
    """
    _check(dialect)
    if dialect == "sqlite":
        conn.execute("PRAGMA journal_mode=WAL")
    with _transaction(conn, dialect):
        for statement in DDL[dialect]:
            conn.execute(statement)


def _customer(r: random.Random, customer_id: int, at: datetime) -> tuple:
    first, last = r.choice(FIRST), r.choice(LAST)
    email = f"{first}.{last}{customer_id}@example.com".lower()
    return (customer_id, f"{first} {last}", email, r.choice(COUNTRIES), at)


def _product(r: random.Random, pid: str, at: datetime) -> tuple:
    adjective, noun = r.choice(ADJECTIVES), r.choice(NOUNS)
    cents = max(100, round(2.718281828 ** r.gauss(3.2, 0.9)) * 100 - r.choice((1, 5, 51)))
    return (pid, f"{adjective} {noun}", noun, Decimal(cents).scaleb(-2), at)


def _stock(r: random.Random, pid: str, at: datetime) -> tuple:
    return (pid, r.choice(WAREHOUSES), r.randrange(0, 500), at)


_INSERT = {
    "customers": "INSERT INTO customers VALUES (?, ?, ?, ?, ?)",
    "products": "INSERT INTO products VALUES (?, ?, ?, ?, ?)",
    "inventory": "INSERT INTO inventory VALUES (?, ?, ?, ?)",
}
_KEY = {"customers": "customer_id", "products": "product_id", "inventory": "product_id"}


def seed(
    conn: Any, dialect: Dialect, *, customers: int = 1000, products: int = 2000, seed: int = 7,
    start: datetime = START,
) -> None:
    """Insert customers ``1..customers``, the products and one inventory row per product."""
    _check(dialect)
    if customers < 0 or products < 0:
        raise ConfigError("oltp: customers and products must be >= 0")
    r = random.Random(f"{seed}:oltp-seed")
    rows = {
        "customers": [_customer(r, i, start) for i in range(1, customers + 1)],
        "products": [_product(r, product_id(i), start) for i in range(products)],
        "inventory": [_stock(r, product_id(i), start) for i in range(products)],
    }
    with _transaction(conn, dialect):
        for table, values in rows.items():
            query = _INSERT[table]
            params = [tuple(_param(dialect, v) for v in row) for row in values]
            if dialect == "postgres":
                conn.cursor().executemany(query.replace("?", "%s"), params)
            else:
                conn.executemany(query, params)


class _Mutator:
    """The state `mutate` keeps: which keys exist and which were deleted (to insert again)."""

    def __init__(self, conn: Any, dialect: str, r: random.Random, now: datetime) -> None:
        self.conn, self.dialect, self.r, self.now, self.tick = conn, dialect, r, now, 0
        self.alive: dict[str, list] = {}
        with _transaction(conn, dialect):
            for table, key in _KEY.items():
                cursor = conn.execute(f"SELECT {key} FROM {table} ORDER BY {key}")
                self.alive[table] = [row[0] for row in cursor.fetchall()]
        self.gone: dict[str, list] = {table: [] for table in _KEY}
        self.next_customer = max(self.alive["customers"], default=0) + 1
        numbers = [int(p[2:]) for p in self.alive["products"] if p.startswith("p-")]
        self.next_product = max(numbers, default=-1) + 1
        self.counts = {"inserts": 0, "updates": 0, "deletes": 0}

    def at(self) -> datetime:
        self.tick += 1
        return self.now + timedelta(microseconds=self.tick * 1000 + self.r.randrange(1000))

    def run(self, query: str, params: Sequence[Any], kind: str) -> None:
        _execute(self.conn, self.dialect, query, params)
        self.counts[kind] += 1

    def update(self, table: str) -> None:
        key = self.r.choice(self.alive[table]) if self.alive[table] else None
        if key is None:
            return self.insert(table)
        for _ in range(self.r.choice((1, 1, 1, 2, 3))):  # sometimes the same key again
            if table == "customers":
                sql = (
                    "UPDATE customers SET email = ?, country = ?, updated_at = ?"
                    " WHERE customer_id = ?"
                )
                email = f"c{key}.{self.tick}@example.org"
                self.run(sql, (email, self.r.choice(COUNTRIES), self.at(), key), "updates")
            elif table == "products":
                price = Decimal(self.r.randrange(99, 99_999)).scaleb(-2)
                sql = "UPDATE products SET price = ?, updated_at = ? WHERE product_id = ?"
                self.run(sql, (price, self.at(), key), "updates")
            else:
                sql = (
                    "UPDATE inventory SET quantity = quantity + ?, updated_at = ?"
                    " WHERE product_id = ?"
                )
                self.run(sql, (self.r.randrange(-20, 40), self.at(), key), "updates")

    def insert(self, table: str, key: Any = None) -> None:
        key = self._new_key(table) if key is None else key
        if key is None:
            return
        make = {"customers": _customer, "products": _product, "inventory": _stock}[table]
        self.run(_INSERT[table], make(self.r, key, self.at()), "inserts")
        self.alive[table].append(key)

    def _new_key(self, table: str) -> Any:
        """A deleted key half of the time, else a fresh one (None: no product lacks stock)."""
        if self.gone[table] and self.r.random() < 0.5:
            return self.gone[table].pop(self.r.randrange(len(self.gone[table])))
        if table == "customers":
            self.next_customer += 1
            return self.next_customer - 1
        if table == "products":
            self.next_product += 1
            return product_id(self.next_product - 1)
        stocked = set(self.alive["inventory"])
        key = next((p for p in self.alive["products"] if p not in stocked), None)
        if key in self.gone[table]:
            self.gone[table].remove(key)
        return key

    def delete(self, table: str) -> None:
        if len(self.alive[table]) < 2:
            return self.insert(table)
        key = self.alive[table].pop(self.r.randrange(len(self.alive[table])))
        self.run(f"DELETE FROM {table} WHERE {_KEY[table]} = ?", (key,), "deletes")
        if self.r.random() < 0.3:  # and back in the same transaction
            return self.insert(table, key)
        self.gone[table].append(key)

    def rekey(self) -> None:
        if not self.alive["customers"]:
            return self.insert("customers")
        old = self.alive["customers"].pop(self.r.randrange(len(self.alive["customers"])))
        new, self.next_customer = self.next_customer, self.next_customer + 1
        sql = "UPDATE customers SET customer_id = ?, updated_at = ? WHERE customer_id = ?"
        self.run(sql, (new, self.at(), old), "updates")
        self.alive["customers"].append(new)
        self.gone["customers"].append(old)


def mutate(
    conn: Any, dialect: Dialect, *, n: int, seed: int = 7, now: datetime = START
) -> Mutations:
    """About `n` row changes in transactions of 1-6 statements; equal inputs, equal changes."""
    _check(dialect)
    if n < 0:
        raise ConfigError("oltp: n must be >= 0")
    r = random.Random(f"{seed}:oltp-mutate")
    m = _Mutator(conn, dialect, r, now)
    tables = ("customers", "products", "inventory")
    weights = (30, 15, 20, 15, 12, 2)  # update ×3 tables, insert, delete, rekey
    transactions = 0
    while sum(m.counts.values()) < n:
        with _transaction(conn, dialect):
            for _ in range(r.randint(1, 6)):
                choice = r.choices(range(6), weights)[0]
                table = r.choice(tables)
                if choice < 3:
                    m.update(tables[choice])
                elif choice == 3:
                    m.insert(table)
                elif choice == 4:
                    m.delete(table)
                else:
                    m.rekey()
        transactions += 1
    return Mutations(transactions=transactions, **m.counts)
