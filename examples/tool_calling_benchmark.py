"""A multi-turn tool-calling benchmark: a shop's support desk (preset "tool-calling").

Load it with ``--plugin`` (or list the file in ``EVOLVER_PLUGIN_PATH``)::

    evolver --plugin examples/tool_calling_benchmark.py eval --benchmark shop-support

Each task is a customer ticket. The agent calls tools (``Task.tools``, OpenAI function schemas) to find
the order, acts by the shop's policy (refund a damaged delivery, reship a lost parcel, cancel an order
not yet shipped, or only tell the delivery estimate) and closes the ticket with a plain-text reply.
The harness sends each call to ``Env.step`` as JSON text, ``{"name": "...", "arguments": {...}}``, and a
plain reply as text. Partial credit: 0.2 for looking up the right order, 0.5 for the right action with
the right arguments, 0.3 for a reply that says what was done; an action the policy forbids caps the
score at 0.2. ``Task.gold`` is the list of calls and the reply that solve the ticket.

The tool docs are long on purpose (several thousand characters each, like a real API reference):
longer than the seed harness's tools budget, so what a harness keeps of them is something to evolve.
See ``evolver/benchmarks/base.py`` for the contract.
"""
import json
import random

from evolver import SPLITS, Benchmark, Env, Observation, Task, ToolCalls, hookimpl

TODAY = "2025-03-20"
SPLIT_BASE = {"train": 0, "dev": 10_000, "test": 20_000}  # disjoint seed ranges: splits never share a task
KINDS = ["damaged", "lost", "cancel", "status"]
LOST_AFTER_DAYS = 10
PRODUCTS = [("ceramic mug", 14.5), ("blue teapot", 32.0), ("linen apron", 21.75), ("oak cutting board", 45.0),
            ("copper kettle", 68.9), ("wool throw", 54.25), ("glass carafe", 19.99), ("cast-iron pan", 39.5)]
FIRST = ["Ada", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Gus", "Hana", "Ivo", "Jun"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Reyes", "Schmidt", "Haddad"]
SYSTEM_PROMPT = (
    "You are a support agent for Tidewater Goods, an online homeware shop. Today is " + TODAY + ". Use the "
    "tools to look up the customer's order before you act. Policy: refund a delivered order that arrived "
    "damaged, in full, with reason \"damaged\"; reship an order whose parcel has had no carrier scan for "
    f"more than {LOST_AFTER_DAYS} days; cancel an order that is still processing; otherwise change nothing "
    "and tell the customer the delivery estimate. Finish with one plain-text reply to the customer (not "
    "JSON), naming the order id and what you did: it closes the ticket.")


# -- the tool reference: long, deterministic -------------------------------------------------------
ORDER_FIELDS = [
    ("order_id", "string", "The order's public id, a capital letter and four digits (for example A1042)."),
    ("email", "string", "The customer's email address as entered at checkout, lower case."),
    ("status", "string", "One of processing, shipped, delivered, cancelled, refunded, reshipped."),
    ("placed", "date", "The day the order was placed, ISO 8601 (YYYY-MM-DD), shop time."),
    ("shipped", "date|null", "The day the parcel was handed to the carrier; null while processing."),
    ("delivered", "date|null", "The day the carrier confirmed delivery; null until then."),
    ("items", "array", "The lines of the order: product name, quantity and unit price."),
    ("total", "number", "What the customer paid, in US dollars, shipping and tax included."),
    ("tracking_id", "string|null", "The carrier's tracking number; pass it to track_shipment."),
    ("carrier", "string|null", "The carrier that holds the parcel (Parcelline, Swiftpost or Harbor Freight)."),
    ("payment", "string", "How the order was paid: card, wallet or gift card; refunds go back the same way."),
    ("warehouse", "string", "The warehouse that packed the order; irrelevant for support decisions."),
    ("gift", "boolean", "Whether the order was sent as a gift; gift orders are refunded to the buyer."),
    ("notes", "string", "Free-text notes left by other agents; never shown to the customer."),
]
ERRORS = [
    ("E400", "A required argument is missing or has the wrong type. Fix the call; do not retry it unchanged."),
    ("E404", "No record matches the id or the address. Check it with the customer or look it up another way."),
    ("E409", "The order's status does not allow this operation (for example cancelling a shipped order)."),
    ("E422", "An argument is out of range (for example a refund larger than the order's total)."),
    ("E429", "Too many calls in a short time. Wait and retry; the desk's tools are rate limited per agent."),
    ("E500", "The back office failed. Retry once; if it fails again, tell the customer you will follow up."),
]
COMMON = [
    "Every call is logged with the agent's id, the ticket id and the arguments, and the log is reviewed "
    "weekly by the support quality team. Calls that change an order (refunds, reshipments, cancellations) "
    "are final: there is no undo, and a wrong one costs the shop money and the customer's trust.",
    "Personal data returned by the tools (names, addresses, payment details) may be used to resolve the "
    "ticket at hand only. Do not repeat a full address or any payment detail back to the customer; the "
    "order id and the product names are enough for them to recognise the order.",
    "Dates are calendar days in the shop's time zone. A parcel's age is counted from the date of its last "
    "carrier scan, not from the day the order was placed or shipped.",
    "The tools answer with JSON. Fields may be added over time; ignore the ones you do not know. A field "
    "documented as nullable is present with the value null rather than absent.",
]


def _field_table(fields) -> str:
    return "\n".join(f"  - {name} ({kind}): {text}" for name, kind, text in fields)


def _doc(summary: str, when: str, args: list[tuple[str, str, str]], returns: str, example: tuple[dict, dict]) -> str:
    """One tool's reference: the summary first (what survives a cut), then the details."""
    call, answer = example
    parts = [summary, "When to use it. " + when,
             "Arguments:\n" + _field_table(args),
             "Returns: " + returns + "\nOrder record fields:\n" + _field_table(ORDER_FIELDS),
             "Errors:\n" + "\n".join(f"  - {code}: {text}" for code, text in ERRORS),
             "Notes. " + " ".join(COMMON),
             "Example call: " + json.dumps(call, sort_keys=True) + "\nExample answer: " + json.dumps(answer)]
    return "\n\n".join(parts)


_EXAMPLE_ORDER = {"order_id": "A1042", "status": "delivered", "total": 32.0, "tracking_id": "TW10420042"}
TOOL_DOCS = {
    "lookup_customer": _doc(
        "Find a customer by email and list their orders (ids, products, statuses).",
        "When the customer did not give an order id, or gave one that does not match. The answer lists every "
        "order of the address, newest first; pick the one the customer describes by its products.",
        [("email", "string", "The customer's email address; case does not matter.")],
        "the customer's name and a list of their orders, each with order_id, placed, status and items.",
        ({"name": "lookup_customer", "arguments": {"email": "ada.okafor@example.com"}},
         {"name": "Ada Okafor", "orders": [{"order_id": "A1042", "items": ["blue teapot"]}]})),
    "lookup_order": _doc(
        "Get one order's full record: status, dates, items, total and tracking number.",
        "Before any action on an order: the status decides what the policy allows, the total is what a "
        "refund pays back, and the tracking number is what track_shipment needs.",
        [("order_id", "string", "The order id, a capital letter and four digits.")],
        "the order record.", ({"name": "lookup_order", "arguments": {"order_id": "A1042"}}, _EXAMPLE_ORDER)),
    "track_shipment": _doc(
        "Get a parcel's carrier scans and delivery estimate by tracking number.",
        f"When the customer asks where a shipped order is. A parcel with no scan for more than "
        f"{LOST_AFTER_DAYS} days is lost (reship it); otherwise it is on its way and the answer's estimate "
        "is what to tell the customer.",
        [("tracking_id", "string", "The tracking number from the order record (tracking_id).")],
        "the carrier, the scans (date and place, oldest first), the last scan's date and the estimate.",
        ({"name": "track_shipment", "arguments": {"tracking_id": "TW10420042"}},
         {"carrier": "Parcelline", "last_scan": "2025-03-18", "estimate": "2025-03-22"})),
    "refund_order": _doc(
        "Refund an order to the customer's original payment method.",
        "Only for a delivered order that arrived damaged: refund the order's total in full, with reason "
        "\"damaged\". A refund is final. Never refund an order that is still on its way or processing.",
        [("order_id", "string", "The order to refund."),
         ("amount", "number", "The amount in US dollars; at most the order's total."),
         ("reason", "string", "One of damaged, not_as_described, goodwill.")],
        "the refund's id, the amount and the order's new status (refunded).",
        ({"name": "refund_order", "arguments": {"amount": 32.0, "order_id": "A1042", "reason": "damaged"}},
         {"refund_id": "R77", "amount": 32.0, "status": "refunded"})),
    "reship_order": _doc(
        "Send a shipped order again, free of charge, with a new tracking number.",
        f"Only for a parcel that is lost: no carrier scan for more than {LOST_AFTER_DAYS} days. A parcel "
        "scanned more recently is late, not lost: give the estimate instead.",
        [("order_id", "string", "The order to send again.")],
        "the new shipment's tracking number and the order's new status (reshipped).",
        ({"name": "reship_order", "arguments": {"order_id": "A1042"}}, {"tracking_id": "TW20420042"})),
    "cancel_order": _doc(
        "Cancel an order that has not shipped yet; the payment is released.",
        "Only while the order's status is processing; a shipped order cannot be cancelled (E409).",
        [("order_id", "string", "The order to cancel.")],
        "the order's new status (cancelled).",
        ({"name": "cancel_order", "arguments": {"order_id": "A1042"}}, {"status": "cancelled"})),
}
PARAMS = {"lookup_customer": {"email": "string"}, "lookup_order": {"order_id": "string"},
          "track_shipment": {"tracking_id": "string"}, "reship_order": {"order_id": "string"},
          "cancel_order": {"order_id": "string"},
          "refund_order": {"order_id": "string", "amount": "number", "reason": "string"}}
TOOLS = [{"type": "function", "function": {
    "name": name, "description": TOOL_DOCS[name],
    "parameters": {"type": "object", "properties": {k: {"type": t} for k, t in PARAMS[name].items()},
                   "required": list(PARAMS[name])}}} for name in PARAMS]
WRITES = {"refund_order", "reship_order", "cancel_order"}


# -- tickets ------------------------------------------------------------------------------------
def _day(offset: int) -> str:
    """TODAY plus ``offset`` days (negative: earlier), as an ISO date; March 2025 only, so no calendar."""
    day = 20 + offset
    return f"2025-{'03' if day >= 1 else '02'}-{day if day >= 1 else day + 28:02d}"


def make_ticket(seed: int, kind: str) -> dict:
    """The world of one ticket: a customer, their orders, the target order and what solves it."""
    rng = random.Random(seed)
    first, last = rng.choice(FIRST), rng.choice(LAST)
    email = f"{first}.{last}@example.com".lower()
    orders = {}
    for product, price in rng.sample(PRODUCTS, rng.randint(2, 3)):  # distinct: the customer names one
        oid = f"{'ABCDEFGH'[rng.randrange(8)]}{rng.randrange(1000, 10000)}"
        qty = rng.randint(1, 2)
        shipped, delivered = -rng.randint(20, 40), -rng.randint(2, 15)
        orders[oid] = {"order_id": oid, "email": email, "status": "delivered", "placed": _day(shipped - 1),
                       "shipped": _day(shipped), "delivered": _day(delivered),
                       "items": [{"product": product, "quantity": qty, "unit_price": price}],
                       "total": round(qty * price + 4.95, 2), "tracking_id": f"TW{rng.randrange(10**7, 10**8)}",
                       "carrier": rng.choice(["Parcelline", "Swiftpost", "Harbor Freight"]),
                       "payment": rng.choice(["card", "wallet", "gift card"]), "warehouse": "Leeds",
                       "gift": False, "notes": ""}
    target = orders[rng.choice(sorted(orders))]
    product = target["items"][0]["product"]
    last_scan = target["shipped"]
    estimate = None
    if kind == "cancel":
        target.update(status="processing", shipped=None, delivered=None, tracking_id=None, carrier=None,
                      placed=_day(-1))
        ask = f"I ordered the {product} by mistake. Please cancel it before it ships."
    elif kind == "damaged":
        ask = f"My {product} arrived broken, in pieces. I'd like my money back."
    else:
        shipped = -rng.randint(12, 18)
        last_scan = _day(shipped + 1) if kind == "lost" else _day(-rng.randint(0, 3))
        estimate = None if kind == "lost" else _day(rng.randint(1, 5))
        target.update(status="shipped", shipped=_day(shipped), delivered=None, placed=_day(shipped - 1))
        ask = (f"Where is my {product}? It shipped weeks ago and nothing has arrived." if kind == "lost"
               else f"Where is my {product}? When will it arrive?")
    by_id = rng.random() < 0.5
    where = f"(order {target['order_id']})" if by_id else "(I don't have the order number to hand.)"
    message = f"Ticket #T{seed} from {first} {last} <{email}>:\n{ask} {where}"
    oid = target["order_id"]
    call = lambda name, **args: ToolCalls.action({"name": name, "arguments": args}, TOOLS)  # noqa: E731
    gold = [] if by_id else [call("lookup_customer", email=email)]
    gold.append(call("lookup_order", order_id=oid))
    if kind in ("lost", "status"):
        gold.append(call("track_shipment", tracking_id=target["tracking_id"]))
    expected = {"damaged": ("refund_order", {"order_id": oid, "amount": target["total"], "reason": "damaged"}),
                "lost": ("reship_order", {"order_id": oid}), "cancel": ("cancel_order", {"order_id": oid}),
                "status": ("track_shipment", {"tracking_id": target["tracking_id"]})}[kind]
    if kind != "status":
        gold.append(call(expected[0], **expected[1]))
    must = {"damaged": ["refund"], "lost": ["replacement"], "cancel": ["cancel"], "status": [estimate]}[kind]
    reply = {"damaged": f"I'm sorry about the {product}. I have issued a full refund of ${target['total']:.2f} "
                        f"for order {oid}.",
             "lost": f"Your parcel for order {oid} appears lost, so I have sent a replacement free of charge.",
             "cancel": f"Done: order {oid} is cancelled and your payment released.",
             "status": f"Order {oid} is on its way and should arrive by {estimate}."}[kind]
    gold.append(reply)
    return {"message": message, "orders": orders, "target": oid, "kind": kind, "expected": expected,
            "must": [*must, oid], "last_scan": last_scan, "estimate": estimate, "gold": gold}


class SupportDeskEnv(Env):
    """One ticket. Tool calls get JSON answers; a plain reply closes the ticket and is scored."""

    def __init__(self, task: Task):
        self.task = task

    def reset(self) -> Observation:
        self.t = make_ticket(self.task.seed, self.task.category)
        self.orders = json.loads(json.dumps(self.t["orders"]))  # this episode's copy: writes change it
        self.credit = {"lookup": 0.0, "resolution": 0.0, "reply": 0.0}
        self.wrong = None
        self.done = False
        return self._obs(self.t["message"])

    def score(self) -> float:
        s = 0.2 * self.credit["lookup"] + 0.5 * self.credit["resolution"] + 0.3 * self.credit["reply"]
        return min(s, 0.2) if self.wrong else round(s, 4)

    def _obs(self, text: str) -> Observation:
        score = self.score()
        rewards = {**self.credit, "policy": 0.0 if self.wrong else 1.0}
        return Observation(text=text, score=score, done=self.done, info={"won": score >= 1.0, "rewards": rewards})

    def step(self, action: str) -> Observation:
        if self.done:
            return self._obs("The ticket is closed.")
        text = action.strip()
        if not text.startswith("{"):
            return self._reply(text)
        try:
            call = json.loads(text)
            name, args = call["name"], call.get("arguments", {})
            args = json.loads(args) if isinstance(args, str) else args
            if not isinstance(name, str) or not isinstance(args, dict):
                raise TypeError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError) as exc:
            return self._obs(f'Error E400: a tool call is {{"name": "TOOL", "arguments": {{...}}}} ({exc})')
        if name not in PARAMS:
            return self._obs(f"Error E404: no tool {name!r}; tools: {', '.join(PARAMS)}")
        missing = [k for k in PARAMS[name] if k not in args]
        if missing:
            return self._obs(f"Error E400: {name} needs {', '.join(missing)}")
        return self._obs(json.dumps(getattr(self, name)(**{k: args[k] for k in PARAMS[name]})))

    # -- the tools: each answers a dict (an error too); writes change this episode's orders ------
    def _order(self, order_id):
        order = self.orders.get(str(order_id).strip().upper())
        return order or {"error": "E404", "message": f"no order {order_id!r}"}

    def lookup_customer(self, email):
        orders = [o for o in self.orders.values() if o["email"] == str(email).strip().lower()]
        if not orders:
            return {"error": "E404", "message": f"no customer with email {email!r}"}
        return {"email": orders[0]["email"], "orders": [{k: o[k] for k in ("order_id", "placed", "status")} |
                                                        {"items": [i["product"] for i in o["items"]]} for o in orders]}

    def lookup_order(self, order_id):
        order = self._order(order_id)
        if order.get("order_id") == self.t["target"]:
            self.credit["lookup"] = 1.0
        return order

    def track_shipment(self, tracking_id):
        order = next((o for o in self.orders.values() if o["tracking_id"] == str(tracking_id).strip()), None)
        if order is None:
            return {"error": "E404", "message": f"no parcel {tracking_id!r}"}
        if order["order_id"] == self.t["target"] and self.t["kind"] == "status":
            self.credit["resolution"] = 1.0
        if order["status"] != "shipped":
            return {"carrier": order["carrier"], "status": "delivered", "delivered": order["delivered"]}
        target = order["order_id"] == self.t["target"]
        last = self.t["last_scan"] if target else order["shipped"]
        return {"carrier": order["carrier"], "status": "in transit", "last_scan": last,
                "estimate": self.t["estimate"] if target else None}

    def _write(self, name, order, args, allowed, new_status):
        if "error" in order:
            return order
        if order["status"] not in allowed:
            return {"error": "E409", "message": f"order {order['order_id']} is {order['status']}"}
        if (name, args) != self.t["expected"]:
            self.wrong = f"{name} {args}"  # the system did it; the policy did not allow it
        else:
            self.credit["resolution"] = 1.0
        order["status"] = new_status
        return {"order_id": order["order_id"], "status": new_status}

    def refund_order(self, order_id, amount, reason):
        order = self._order(order_id)
        if not isinstance(amount, (int, float)) or amount <= 0:
            return {"error": "E400", "message": "amount must be a positive number"}
        if "total" in order and amount > order["total"] + 1e-9:
            return {"error": "E422", "message": f"the order's total is {order['total']}"}
        if reason not in ("damaged", "not_as_described", "goodwill"):
            return {"error": "E400", "message": f"unknown reason {reason!r}"}
        args = {"order_id": order.get("order_id"), "amount": amount, "reason": reason}
        return self._write("refund_order", order, args, ("delivered",), "refunded") | {"amount": amount}

    def reship_order(self, order_id):
        order = self._order(order_id)
        return self._write("reship_order", order, {"order_id": order.get("order_id")}, ("shipped",), "reshipped")

    def cancel_order(self, order_id):
        order = self._order(order_id)
        return self._write("cancel_order", order, {"order_id": order.get("order_id")}, ("processing",),
                           "cancelled")

    def _reply(self, text: str) -> Observation:
        self.done = True
        said = text.lower()
        if self.credit["resolution"] and all(str(w).lower() in said for w in self.t["must"]):
            self.credit["reply"] = 1.0
        return self._obs("Ticket closed. Customer: Thank you!" if self.score() >= 1.0 else "Ticket closed.")


class SupportDeskBenchmark(Benchmark):
    name = "shop-support"
    categories = KINDS
    max_steps = 10
    harness_hints = {"preset": "tool-calling", "system_prompt": SYSTEM_PROMPT}

    def __init__(self):  # no options
        pass

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        out = []
        for i in range(per_category or 10):
            for c, kind in enumerate(KINDS):
                seed = SPLIT_BASE[split] + i * len(KINDS) + c
                t = make_ticket(seed, kind)
                out.append(Task(id=f"shop-support/{split}/{kind}/{i}", benchmark=self.name, split=split,
                                category=kind, seed=seed, prompt=t["message"], gold=t["gold"], tools=TOOLS,
                                max_steps=len(t["gold"]) + 4))
        return out

    def env(self, task: Task) -> SupportDeskEnv:
        return SupportDeskEnv(task)


@hookimpl
def register_benchmarks(register):
    register("shop-support", SupportDeskBenchmark, description="a shop's support desk with tools (example plugin)")
