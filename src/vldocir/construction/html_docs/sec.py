"""The SEC EDGAR look: a proxy statement (DEF 14A, :func:`_sec`) and its stylesheet."""

from __future__ import annotations

from collections.abc import Callable

from vldocir.construction.html_docs.document import PAGE_CSS_HEIGHT, _Doc, _quirks_block
from vldocir.construction.html_docs.drawings import _line_plot
from vldocir.construction.html_docs.text import _base, _cap, _esc, _jitter, _near, _number, _person, _sentences

_SEC_CSS = """
body{margin:0;background:#fff;color:#000;font-family:"Liberation Serif","Times New Roman",serif;font-size:14px;line-height:1.43}
.filing{max-width:880px;margin:0 auto;padding:30px 40px}
.cover{text-align:center;padding:40px 0 30px;border-bottom:3px double #000}
.cover .company{font-size:30px;font-weight:bold;letter-spacing:1px}
.cover .notice{font-size:18px;margin-top:14px}
h2{font-size:19px;text-transform:uppercase;margin:24px 0 8px;color:#00305e;line-height:1.3}
h3{font-size:16px;margin:14px 0 6px;line-height:1.3}
p{margin:5px 0 5px;text-align:justify}
table{width:100%;border-collapse:collapse;margin:10px 0;font-size:13px;line-height:1.3}
table caption{text-align:left;font-weight:bold;padding:4px 0;color:#00305e}
th,td{padding:3px 6px;border-bottom:1px solid #999;text-align:right}
th[scope=row],td:first-child,thead th:first-child{text-align:left}
thead th{border-bottom:2px solid #000;vertical-align:bottom;background:#e9eef4}
ul,ol{margin:6px 0;padding-left:32px}
.toc li{margin:2px 0}
figure{margin:12px 0;text-align:center}
figure figcaption{font-size:13px;line-height:1.3}
.page-number{text-align:center;font-size:12px;margin-top:18px;color:#333}
hr.page-break{border:0;border-top:1px solid #bbb;margin:6px 0 18px}
"""

_SEC_SECTIONS = (
    "Proxy summary",
    "Proposal 1: Election of directors",
    "Corporate governance",
    "Director compensation",
    "Proposal 2: Ratification of the independent auditor",
    "Compensation discussion and analysis",
    "Executive compensation tables",
    "Pay versus performance",
    "Proposal 3: Advisory vote on executive compensation",
    "Security ownership of certain beneficial owners and management",
    "Voting results of the 2024 annual meeting",
    "Questions and answers about the annual meeting",
)
_SEC_OFFICERS = (
    "Chief Executive Officer",
    "Chief Financial Officer",
    "Chief Operating Officer",
    "General Counsel",
    "Chief Technology Officer",
)
_SEC_SCT = (
    "Name and principal position",
    "Year",
    "Salary ($)",
    "Bonus ($)",
    "Stock awards ($)",
    "Option awards ($)",
    "Non-equity incentive ($)",
    "All other compensation ($)",
    "Total ($)",
)
_SEC_DIRECTOR = (
    "Name",
    "Fees earned or paid in cash ($)",
    "Stock awards ($)",
    "All other compensation ($)",
    "Total ($)",
)
_SEC_VOTES = ("Proposal", "Votes for", "Votes against", "Abstentions", "Broker non-votes")
_SEC_OWNERSHIP = ("Name of beneficial owner", "Shares beneficially owned", "Percent of class")
_SEC_KV = ("Item", "Fiscal 2024", "Fiscal 2023")
_SEC_KV_LABELS = (
    "Salary of the chief operating officer",
    "Non-equity incentive of the chief executive",
    "Audit-related fees",
    "Tax fees",
    "All other fees",
    "Perquisites of the general counsel",
    "Committee chair retainer",
    "Lead independent director fee",
    "Deferred compensation earnings",
)
_SEC_HOLDERS = ("Northgate Capital Partners", "Elm Street Advisors", "Harbor Index Trust")
_SEC_QUESTIONS = (
    "Who can vote at the annual meeting?",
    "How do I vote my shares?",
    "What is a broker non-vote?",
    "Can I change my vote after I submit my proxy?",
    "Who pays for the solicitation of proxies?",
    "What constitutes a quorum?",
    "How can I attend the annual meeting?",
)
_SEC_PROPOSALS = (
    "Election of directors (average)",
    "Ratification of the independent auditor",
    "Advisory vote on executive compensation",
    "Approval of the equity incentive plan",
)


def _sec(doc: _Doc, target_height: float) -> str:
    """A proxy statement: cover, letter, table of contents, the proposals and disclosure sections,
    with the same tables in every filing (summary compensation, director compensation, voting
    results, beneficial ownership: distractors with near-duplicate numbers; "Item | Fiscal 2024 |
    Fiscal 2023" tables: table-row facts), director bios, highlights lists, a pay-versus-performance
    chart (image fact), printed page footers, no clutter. Returns the title."""
    company = f"{_cap(doc.entity)} Holdings, Inc."
    title = f"{company} 2025 Proxy Statement"
    directors = [_person(doc.rng) for _ in range(int(doc.rng.integers(8, 12)))]
    officers = [(_person(doc.rng), t) for t in _SEC_OFFICERS]
    bios = list(directors)
    section = ["Proxy summary"]  # the current section, named in table captions
    page = [1, PAGE_CSS_HEIGHT * 0.95]

    def money(key: str, lo: float, hi: float, spread: float = 0.04) -> str:
        return f"{round(_near(doc.rng, _base('sec', key, lo, hi), spread), -3):,.0f}"

    def page_footer():
        if doc.height >= page[1]:
            doc.add(
                f'<div class="page-number">{_esc(company)} | 2025 Proxy Statement | {page[0]}</div>'
                '<hr class="page-break">\n',
                35,
            )
            page[0] += 1
            page[1] = doc.height + PAGE_CSS_HEIGHT * 0.95

    def paragraph():
        doc.paragraph(_sentences(doc, int(doc.rng.integers(3, 8))))

    def highlights():
        doc.bullets([s.rstrip(".") for s in _sentences(doc, int(doc.rng.integers(2, 4)))], max_facts=2)

    def kv_table(caption: str = ""):
        """An "Item | Fiscal 2024 | Fiscal 2023" table: fact rows among near-duplicate distractor rows."""
        caption = caption or f"{section[0].split(': ')[-1].capitalize()}: key figures"
        labels = list(doc.rng.permutation(_SEC_KV_LABELS))[: int(doc.rng.integers(3, 6))]
        rows = []
        for lab in labels:
            current = money(lab, 20_000, 900_000)
            rows.append(([lab, "$" + current, "$" + _jitter(doc, current)], None))
        for fact in doc.facts_for("table_row", "table_row", 3, (len(rows) + 4) * 24):
            prior = _jitter(doc, f"{_number(fact.value):,.0f}")
            prior = ("$" if fact.value.startswith("$") else "") + prior
            rows.insert(int(doc.rng.integers(len(rows) + 1)), ([_cap(fact.attribute), fact.value, prior], fact))
        doc.table(_SEC_KV, rows, caption=caption, cls="kv")

    def summary_compensation():
        rows = []
        for name, position in officers:
            for year in (2024, 2023, 2022):
                amounts = [
                    money(f"{position}|{col}|{year}", 0 if col.startswith("Bonus") else 200_000, 3_000_000)
                    for col in _SEC_SCT[2:-1]
                ]
                total = sum(int(a.replace(",", "")) for a in amounts)
                label = f"{name}, {position}" if year == 2024 else ""
                rows.append(([label, str(year), *amounts, f"{total:,}"], None))
        doc.table(_SEC_SCT, rows, caption="Summary compensation table", cls="summary-compensation", row_header=False)
        kv_table("Summary compensation table: key elements")

    def director_compensation():
        rows = []
        for name in directors:
            fees, stock = money("dir|fees", 80_000, 140_000), money("dir|stock", 150_000, 220_000)
            other = money("dir|other", 0, 20_000, 0.5)
            total = sum(int(x.replace(",", "")) for x in (fees, stock, other))
            rows.append(([name, fees, stock, other, f"{total:,}"], None))
        doc.table(_SEC_DIRECTOR, rows, caption="Director compensation table", cls="director-compensation")

    def vote_results():
        ranges = ((4e7, 9e7), (1e6, 2e7), (1e5, 1e6), (1e6, 6e6))  # for, against, abstentions, broker non-votes
        rows = []
        for proposal in _SEC_PROPOSALS:
            counts = [
                _near(doc.rng, _base("sec", f"{proposal}|{c}", lo, hi))
                for c, (lo, hi) in zip(_SEC_VOTES[1:], ranges, strict=True)
            ]
            rows.append(([proposal, *(f"{int(n):,}" for n in counts)], None))
        doc.table(_SEC_VOTES, rows, caption="Voting results", cls="vote-results")
        kv_table("Voting and meeting details")

    def ownership():
        holders = list(_SEC_HOLDERS) + directors[:6] + ["All directors and executive officers as a group"]
        rows = []
        for holder in holders:
            shares = _near(doc.rng, _base("sec", f"own|{holder[:8]}", 1e4, 2e7))
            rows.append(([holder, f"{int(shares):,}", f"{doc.rng.uniform(0.1, 9.5):.1f}%"], None))
        doc.table(_SEC_OWNERSHIP, rows, caption="Beneficial ownership table", cls="beneficial-ownership")

    def pay_versus_performance():
        """Return of the company against its peers by year; the marked last point is an image fact."""
        fact = doc.new_fact("image", "image") if doc.due(1, 400) else None
        xs = [2020.0, 2021.0, 2022.0, 2023.0, 2024.0]
        peer = [_near(doc.rng, _base("sec", f"peer|{x}", 80, 160)) for x in xs]
        ours = [_near(doc.rng, p, 0.15) for p in peer]
        mark, title = None, f"Cumulative total shareholder return of {company}"
        if fact is not None:
            ours[-1] = _number(fact.value)
            mark, title = (0, len(xs) - 1, fact.value), f"{_cap(fact.attribute)} of {company}"
        body = _line_plot(
            xs, [(company, ours), ("Peer group index", peer)], "Fiscal year", "Return (%)", title, mark=mark
        )
        doc.figure(body, 320, "Compensation actually paid versus cumulative total shareholder return", fact=fact)

    def director_bio():
        if not bios:
            return paragraph()
        name = bios.pop(0)
        doc.heading(3, name)
        doc.paragraph(
            [
                f"{name}, age {int(doc.rng.integers(45, 76))}, has served as a director since "
                f"{int(doc.rng.integers(2005, 2024))}.",
                *_sentences(doc, 3),
            ]
        )

    def question():
        doc.heading(3, doc.pick(_SEC_QUESTIONS))
        paragraph()

    doc.add('<div class="filing">\n')
    doc.add(
        f'<div class="cover"><div class="company">{_esc(company.upper())}</div>'
        '<div class="notice">NOTICE OF 2025 ANNUAL MEETING OF SHAREHOLDERS AND PROXY STATEMENT</div></div>\n',
        156,
    )
    doc.paragraph([f"Dear Shareholders of {company}:", *_sentences(doc, 5)])
    toc = "".join(f"<li>{_esc(s)} ........ {3 + 4 * i}</li>" for i, s in enumerate(_SEC_SECTIONS))
    doc.add(f'<h2>Table of contents</h2><ol class="toc">{toc}</ol>\n', doc.m.h2_px + 22 * len(_SEC_SECTIONS) + 10)

    specials: dict[str, tuple[Callable[[], None], ...]] = {
        "Proxy summary": (highlights,),
        "Proposal 1: Election of directors": (director_bio, director_bio),
        "Director compensation": (director_compensation, kv_table),
        "Proposal 2: Ratification of the independent auditor": (kv_table,),
        "Executive compensation tables": (summary_compensation,),
        "Pay versus performance": (pay_versus_performance,),
        "Security ownership of certain beneficial owners and management": (ownership,),
        "Voting results of the 2024 annual meeting": (vote_results,),
    }
    fill_blocks = {
        "Proposal 1: Election of directors": [(6, director_bio), (1, paragraph)],
        "Director compensation": [(4, paragraph), (1, director_compensation), (1.5, kv_table)],
        "Executive compensation tables": [(3, paragraph), (1, summary_compensation), (1, kv_table)],
        "Pay versus performance": [(4, paragraph), (1, pay_versus_performance), (1, kv_table)],
        "Security ownership of certain beneficial owners and management": [(4, paragraph), (1, ownership)],
        "Voting results of the 2024 annual meeting": [(3, paragraph), (1, vote_results)],
        "Questions and answers about the annual meeting": [(1, question)],
    }
    default_blocks = [(6, paragraph), (1.3, kv_table), (1, highlights)]
    body_end = target_height - 60
    for i, name in enumerate(_SEC_SECTIONS):
        section[0] = name
        doc.heading(2, name)
        until = doc.height + (body_end - doc.height) / (len(_SEC_SECTIONS) - i)
        for block in specials.get(name, (paragraph,)):
            block()
            page_footer()
        blocks = [(w, (lambda b=b: (b(), page_footer()))) for w, b in fill_blocks.get(name, default_blocks)]
        doc.fill(until, blocks)
    _quirks_block(doc)
    secretary = _person(doc.rng)
    doc.add(
        f'<p class="signature">By order of the Board of Directors, {_esc(secretary)}, Corporate Secretary</p>\n', 40
    )
    doc.add("</div>\n")
    return title
