"""Generate the HR schema of the seeds as a series of table snapshots.

Snapshot 1 is the initial load; every later round inserts, updates (including key
columns such as an employee's ``department_id``) and deletes rows, and writes a new
snapshot of every table. Output: ``<root>/hr.<table>/snap=<n>/part-0.parquet``.
The generator continues from the latest snapshot on disk, so rounds can be added.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import random
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

D = decimal.Decimal

SCHEMAS: dict[str, pa.Schema] = {
    "regions": pa.schema([("region_id", pa.int32()), ("region_name", pa.string())]),
    "countries": pa.schema(
        [("country_id", pa.string()), ("country_name", pa.string()), ("region_id", pa.int32())]
    ),
    "locations": pa.schema([
        ("location_id", pa.int32()), ("street_address", pa.string()),
        ("postal_code", pa.string()), ("city", pa.string()), ("state_province", pa.string()),
        ("country_id", pa.string()),
    ]),
    "departments": pa.schema([
        ("department_id", pa.int32()), ("department_name", pa.string()),
        ("manager_id", pa.int32()), ("location_id", pa.int32()),
    ]),
    "jobs": pa.schema([
        ("job_id", pa.string()), ("job_title", pa.string()),
        ("min_salary", pa.decimal128(8, 2)), ("max_salary", pa.decimal128(8, 2)),
    ]),
    "employees": pa.schema([
        ("employee_id", pa.int32()), ("first_name", pa.string()), ("last_name", pa.string()),
        ("email", pa.string()), ("phone_number", pa.string()), ("hire_date", pa.date32()),
        ("job_id", pa.string()), ("salary", pa.decimal128(8, 2)),
        ("commission_pct", pa.decimal128(2, 2)), ("manager_id", pa.int32()),
        ("department_id", pa.int32()), ("active", pa.bool_()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]),
    "job_history": pa.schema([
        ("employee_id", pa.int32()), ("start_date", pa.date32()), ("end_date", pa.date32()),
        ("job_id", pa.string()), ("department_id", pa.int32()),
    ]),
}

KEYS: dict[str, list[str]] = {
    "regions": ["region_id"], "countries": ["country_id"], "locations": ["location_id"],
    "departments": ["department_id"], "jobs": ["job_id"], "employees": ["employee_id"],
    "job_history": ["employee_id", "start_date"],
}

REGIONS = ["Europe", "Americas", "Asia", "Middle East and Africa"]
COUNTRIES = [("UK", "United Kingdom", 1), ("DE", "Germany", 1), ("FR", "France", 1),
             ("US", "United States of America", 2), ("CA", "Canada", 2), ("BR", "Brazil", 2),
             ("JP", "Japan", 3), ("IN", "India", 3), ("CN", "China", 3), ("EG", "Egypt", 4),
             ("IL", "Israel", 4), ("NG", "Nigeria", 4)]
CITIES = ["London", "Munich", "Paris", "Seattle", "Toronto", "Sao Paulo", "Tokyo", "Bombay",
          "Beijing", "Cairo", "Tel Aviv", "Lagos", "Oxford", "Southlake", "Geneva"]
JOBS = [("AD_PRES", "President"), ("AD_VP", "Administration Vice President"),
        ("IT_PROG", "Programmer"), ("FI_ACCOUNT", "Accountant"), ("SA_REP", "Sales Representative"),
        ("SA_MAN", "Sales Manager"), ("ST_CLERK", "Stock Clerk"), ("HR_REP", "Human Resources Rep"),
        ("MK_MAN", "Marketing Manager"), ("PU_CLERK", "Purchasing Clerk")]
DEPTS = ["Administration", "Marketing", "Purchasing", "Human Resources", "Shipping", "IT",
         "Public Relations", "Sales", "Executive", "Finance", "Accounting", "Operations"]
FIRST = ["Steven", "Neena", "Lex", "Alexander", "Bruce", "David", "Valli", "Diana", "Nancy",
         "Daniel", "John", "Ismael", "Luis", "Den", "Shelli", "Sigal", "Guy", "Karen", "Susan"]
LAST = ["King", "Kochhar", "De Haan", "Hunold", "Ernst", "Austin", "Pataballa", "Lorentz",
        "Greenberg", "Faviet", "Chen", "Sciarra", "Urman", "Popp", "Raphaely", "Khoo", "Baida"]


@dataclass
class HrDatabase:
    """The source database's current rows, per table, keyed by primary key."""

    rows: dict[str, dict[tuple, dict]] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    next_employee: int = 100

    def put(self, table: str, row: dict) -> None:
        key = tuple(row[k] for k in KEYS[table])
        self.rows.setdefault(table, {})[key] = row


def initial(db: HrDatabase, employees: int) -> None:
    """The initial load."""
    rng = db.rng
    for i, name in enumerate(REGIONS, 1):
        db.put("regions", {"region_id": i, "region_name": name})
    for cid, cname, rid in COUNTRIES:
        db.put("countries", {"country_id": cid, "country_name": cname, "region_id": rid})
    for i, city in enumerate(CITIES):
        db.put("locations", {
            "location_id": 1000 + 100 * i, "street_address": f"{rng.randint(1, 9999)} Main St",
            "postal_code": f"{rng.randint(10000, 99999)}", "city": city,
            "state_province": None if i % 4 == 0 else f"Province {i}",
            "country_id": COUNTRIES[i % len(COUNTRIES)][0]})
    for jid, title in JOBS:
        lo = D(rng.randrange(2000, 8000))
        db.put("jobs", {"job_id": jid, "job_title": title, "min_salary": lo,
                        "max_salary": lo + D(rng.randrange(2000, 20000))})
    for i, dname in enumerate(DEPTS, 1):
        db.put("departments", {"department_id": 10 * i, "department_name": dname,
                               "manager_id": None, "location_id": 1000 + 100 * (i % len(CITIES))})
    for _ in range(employees):
        _hire(db)


def _hire(db: HrDatabase) -> None:
    rng = db.rng
    eid = db.next_employee
    db.next_employee += 1
    first, last = rng.choice(FIRST), rng.choice(LAST)
    db.put("employees", {
        "employee_id": eid, "first_name": first, "last_name": last,
        "email": f"{first[0]}{last.replace(' ', '')}{eid}".upper(),
        "phone_number": f"515.123.{rng.randint(1000, 9999)}",
        "hire_date": dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(0, 9000)),
        "job_id": rng.choice(JOBS)[0], "salary": D(rng.randrange(250000, 2400000)) / 100,
        "commission_pct": None if rng.random() < 0.7 else D(rng.randint(5, 40)) / 100,
        "manager_id": None if eid == 100 else rng.randint(100, max(100, eid - 1)),
        "department_id": 10 * rng.randint(1, len(DEPTS)), "active": True,
        "updated_at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        + dt.timedelta(seconds=rng.randint(0, 10**7))})


def change_round(db: HrDatabase, n: int, changes: int) -> None:
    """One round of inserts, updates (incl. department moves) and deletes."""
    rng = db.rng
    emps = db.rows["employees"]
    for _ in range(max(1, changes // 3)):
        _hire(db)
    for key in rng.sample(sorted(emps), min(len(emps), changes // 2)):
        e = dict(emps[key])
        old_dept, old_job = e["department_id"], e["job_id"]
        e["department_id"] = 10 * rng.randint(1, len(DEPTS))
        e["salary"] = (e["salary"] * D("1.05")).quantize(D("0.01"))
        e["job_id"] = rng.choice(JOBS)[0]
        e["updated_at"] = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=n)
        db.put("employees", e)
        db.put("job_history", {"employee_id": e["employee_id"],
                               "start_date": e["hire_date"] + dt.timedelta(days=n),
                               "end_date": dt.date(2025, 1, 1) + dt.timedelta(days=n),
                               "job_id": old_job, "department_id": old_dept})
    for key in rng.sample(sorted(emps), min(len(emps) - 1, max(1, changes // 10))):
        del emps[key]
    depts = db.rows["departments"]
    dkey = rng.choice(sorted(depts))
    depts[dkey] = {**depts[dkey], "manager_id": rng.choice(sorted(emps))[0]}
    loc = rng.choice(sorted(db.rows["locations"]))
    db.rows["locations"][loc] = {**db.rows["locations"][loc],
                                 "street_address": f"{rng.randint(1, 9999)} Round {n} Ave"}


def write_snapshot(db: HrDatabase, root: str, n: int) -> None:
    """Write snapshot ``n`` of every table."""
    for table, schema in SCHEMAS.items():
        rows = sorted(db.rows.get(table, {}).values(),
                      key=lambda r: tuple(str(r[k]) for k in KEYS[table]))
        path = os.path.join(root, f"hr.{table}", f"snap={n}")
        os.makedirs(path, exist_ok=True)
        table_data = pa.Table.from_pylist(rows, schema=schema)
        pq.write_table(table_data, os.path.join(path, "part-0.parquet"))


def latest_snapshot(root: str) -> int:
    """The highest snapshot number written so far (0 when none)."""
    path = os.path.join(root, "hr.employees")
    if not os.path.isdir(path):
        return 0
    nums = [int(d[5:]) for d in os.listdir(path) if d.startswith("snap=") and d[5:].isdigit()]
    return max(nums, default=0)


def load(root: str, n: int) -> HrDatabase:
    """Rebuild the database from snapshot ``n``."""
    db = HrDatabase()
    db.rng = random.Random(7 + n)
    for table in SCHEMAS:
        for row in pq.read_table(os.path.join(root, f"hr.{table}", f"snap={n}")).to_pylist():
            db.put(table, row)
    db.next_employee = max(k[0] for k in db.rows["employees"]) + 1
    return db


def generate(root: str, *, rounds: int, employees: int = 500, changes: int = 120) -> list[int]:
    """Write the initial snapshot (if none) and ``rounds`` more. Returns the new numbers."""
    n = latest_snapshot(root)
    written = []
    if n == 0:
        db = HrDatabase()
        initial(db, employees)
        n = 1
        write_snapshot(db, root, n)
        written.append(n)
    else:
        db = load(root, n)
    for _ in range(rounds):
        n += 1
        change_round(db, n, changes)
        write_snapshot(db, root, n)
        written.append(n)
    return written
