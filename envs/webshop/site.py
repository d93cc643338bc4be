"""The WebShop site as a state machine: search page -> results (10 per page, 50 hits) -> item page
(options, description/features/reviews sub-pages) -> buy; rendered as WebShop's "simple text"
observation (visible strings joined by " [SEP] ") with the page's clickable elements.
"""

from __future__ import annotations

import dataclasses
import re

from envs.searchqa.bm25 import BM25Index
from envs.webshop.data import Catalog
from envs.webshop.reward import PurchaseScore, purchase_score
from envs.webshop.types import Goal, Product

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
BUY_NOW, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "buy now", "next >", "< prev", "back to search"
SUB_PAGES = {"description": "Description", "features": "Features", "reviews": "Reviews"}
SEP = " [SEP] "
_ACTION = re.compile(r"(.+)\[(.+)\]")  # WebShop's pattern: `.` stops at a newline


def parse_action(action: str) -> tuple[str, str | None]:
    """"click[Buy Now]" -> ("click", "Buy Now"); text without brackets -> (text, None)."""
    match = _ACTION.match(action)
    return (action, None) if match is None else (match.group(1), match.group(2))


class ProductSearch:
    """BM25 over each product's title, description, bullet points and option values."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        docs = [" ".join([p.title, p.description, *p.bullet_points, *(v for vs in p.options.values() for v in vs)])
                for p in catalog.products]
        self.index = BM25Index(docs)

    def search(self, keywords: str) -> list[Product]:
        ids, _ = self.index.search(keywords, SEARCH_RETURN_N)
        return [self.catalog.products[i] for i in ids]


@dataclasses.dataclass
class Session:
    """One shopper's browsing state."""

    goal: Goal
    page: str = "search"  # search | results | item | sub | done
    keywords: str = ""
    hits: list[Product] = dataclasses.field(default_factory=list)
    page_num: int = 1
    asin: str | None = None
    sub_page: str = ""
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    visited: set[str] = dataclasses.field(default_factory=set)
    score: PurchaseScore | None = None


class WebShopSite:
    """Applies `search[...]` / `click[...]` to a Session and renders pages (shared, stateless)."""

    def __init__(self, catalog: Catalog, search: ProductSearch | None = None):
        self.catalog = catalog
        self.engine = search or ProductSearch(catalog)

    # ---- what can be done on the current page
    def has_search_bar(self, s: Session) -> bool:
        return s.page == "search"

    def clickables(self, s: Session) -> list[str]:
        """Lower-case clickable element texts of the page, in page order."""
        if s.page == "search":
            return ["search"]
        if s.page == "results":
            # WebShop's results page always has "Next >", past the last page too (the page is then empty).
            out = [BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE] if s.page_num > 1 else [BACK_TO_SEARCH, NEXT_PAGE]
            return out + [p.asin.lower() for p in self._page_products(s)]
        if s.page == "item":
            product = self.catalog.by_asin[s.asin]
            values = [v for vs in product.options.values() for v in vs]
            return [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW, *dict.fromkeys(values)]
        if s.page == "sub":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def available_actions(self, s: Session) -> list[str]:
        """Actions as shown to the agent, e.g. ["search[<content>]"] or ["click[buy now]", ...]. As RAGEN does, an
        empty results page past the last one lists only back/prev (`click[next >]` still works there)."""
        actions = ["search[<content>]"] if self.has_search_bar(s) else []
        actions += [f"click[{c}]" for c in self.clickables(s) if c != "search"]
        if actions == [f"click[{BACK_TO_SEARCH}]", f"click[{PREV_PAGE}]", f"click[{NEXT_PAGE}]"]:
            actions.remove(f"click[{NEXT_PAGE}]")
        return actions

    def end_of_page(self, s: Session) -> bool:
        """RAGEN's `end_of_page`: the listed actions are only back/prev (an empty results page, or a sub-page)."""
        return self.available_actions(s) == [f"click[{BACK_TO_SEARCH}]", f"click[{PREV_PAGE}]"]

    # ---- transitions
    def step(self, s: Session, action: str) -> tuple[bool, bool]:
        """Apply one action in place; returns (valid, done). Invalid actions change nothing, except that
        `search[...]` runs from any page, as in WebShop; it is valid only where the page has a search bar."""
        name, arg = parse_action(action.strip())
        arg = arg.lower() if arg is not None else None  # only lower-cased, as WebShop: "click[ buy now]" is unknown
        if name == "search" and arg:
            valid = self.has_search_bar(s)
            self._search(s, arg, 1)
            return valid, False
        if name != "click" or arg is None or arg == "search" or arg not in self.clickables(s):
            return False, False
        if arg == BUY_NOW:
            product = self.catalog.by_asin[s.asin]
            s.score = purchase_score(product, s.goal, self.catalog.prices[product.asin], s.options)
            s.page = "done"
            return True, True
        if arg == BACK_TO_SEARCH:
            s.page, s.keywords, s.hits, s.page_num, s.asin, s.options = "search", "", [], 1, None, {}
        elif arg == NEXT_PAGE:
            s.page_num += 1
        elif arg == PREV_PAGE:
            if s.page == "results":
                s.page_num -= 1
            elif s.page == "sub":
                s.page = "item"
            else:  # item page -> back to the same results page; options are cleared as on a new search
                s.page, s.options = "results", {}
        elif arg in SUB_PAGES:
            s.page, s.sub_page = "sub", arg
        elif s.page == "results":
            s.page, s.asin = "item", arg.upper()
            s.visited.add(s.asin)
        else:  # an option value on the item page
            s.options[self.catalog.by_asin[s.asin].option_name_of(arg)] = arg
        return True, False

    def _search(self, s: Session, keywords: str, page_num: int) -> None:
        s.page, s.keywords, s.page_num, s.asin, s.options = "results", keywords, page_num, None, {}
        s.hits = self.engine.search(keywords)

    def _page_products(self, s: Session) -> list[Product]:
        start = (s.page_num - 1) * PRODUCT_WINDOW
        return s.hits[start:start + PRODUCT_WINDOW]

    # ---- rendering
    def render(self, s: Session) -> str:
        """WebShop's simple text observation of the current page."""
        head = ["Instruction:", s.goal.instruction_text]
        if s.page == "search":
            parts = ["WebShop", *head, "Search"]
        elif s.page == "results":
            parts = [*head, "Back to Search", f"Page {s.page_num} (Total results: {len(s.hits)})"]
            parts += (["< Prev"] if s.page_num > 1 else []) + ["Next >"]
            for p in self._page_products(s):
                parts += [p.asin, p.title, p.price_tag]
        elif s.page == "item":
            p = self.catalog.by_asin[s.asin]
            parts = [*head, "Back to Search", "< Prev"]
            for name, values in p.options.items():
                parts += [name, *values]
            parts += [p.title, f"Price: {p.price_tag}", f"Rating: {p.rating}", *SUB_PAGES.values(), "Buy Now"]
        elif s.page == "sub":
            p = self.catalog.by_asin[s.asin]
            parts = [*head, "Back to Search", "< Prev"] + self._sub_page_text(p, s.sub_page)
        else:
            chosen = ", ".join(f"{k}: {v}" for k, v in s.options.items()) or "none"
            parts = ["Thank you for shopping with us!", "Purchased", s.asin or "", f"Options: {chosen}",
                     "Your score (min 0.0, max 1.0)", f"{s.score.total:.2f}" if s.score else "0.00"]
        return SEP.join(part.strip() for part in parts if part.strip())

    @staticmethod
    def _sub_page_text(p: Product, which: str) -> list[str]:
        if which == "description":
            return [p.description]
        if which == "features":
            return list(p.bullet_points)
        return [text for r in p.reviews for text in (f'"{r.title}"', f"{r.score:g}", r.body)]  # WebShop's template
