"""The published numbers of the CoS paper as data: Fu et al., "Fast Large Language Model Collaborative
Decoding via Speculation", ICML 2025 (arXiv 2502.01662, v2), Tables 2-8, read off the paper itself.

Keys: family ("we" | "cd"), the paper's pair name, temperature, role. Roles: "parallel" (WE-P / CD-P:
members on separate devices, not reproduced here), "naive" (the paper's "SD" = Naive-CoS, our
we_sd / cd_sd) and "cos" (we_chef / cd_chef). Values per dataset, in the paper's column order.
The NPU tables (9, 10) are left out: other hardware. The figures are kept as the text read off them.
"""

from __future__ import annotations

DATASETS = ("humaneval", "gsm8k", "mmlu", "cnndm")
ROLES = {"we_sd": "naive", "cd_sd": "naive", "we_chef": "cos", "cd_chef": "cos", "we_mix": "mix", "we_mix_sd": "mix_sd"}
ROLE_NAMES = {"parallel": "-P (parallel)", "naive": "SD (Naive-CoS)", "cos": "CoS", "standard": "standard",
              "mix": "ME (mixture)", "mix_sd": "coin-first hybrid"}  # mix*: not in the CoS paper (no published row)


def _row(text: str, datasets: tuple[str, ...] = DATASETS) -> dict[str, float]:
    """'1.27/1.21/1.19/1.15' -> {dataset: value}, in the paper's column order."""
    return dict(zip(datasets, (float(v) for v in text.split("/")), strict=True))


def _table(text: str, roles: tuple[str, ...], datasets: tuple[str, ...] = DATASETS) -> dict:
    """Lines 'family | pair | T | one column per role' ('-': not published) -> {(family, pair, T): {role: row}}."""
    table = {}
    for line in text.strip().splitlines():
        fam, pair, t, *columns = (c.strip() for c in line.split("|"))
        rows = zip(roles, columns, strict=True)
        table[fam, pair, float(t)] = {role: _row(c, datasets) for role, c in rows if c != "-"}
    return table


# Table 2 (WE, λ = 0.5, T = 1) and Tables 3, 4 (CD, μ = 0.1): speedup over standard collaborative decoding.
SPEEDUP = _table("""
we | Llama-Vicuna      | 1 | .69/.73/.70/.75 | 1.27/1.21/1.19/1.15 | 1.58/1.52/1.41/1.46
we | Qwen-3b           | 1 | .74/.79/.79/.77 | 1.13/1.06/1.09/1.08 | 1.62/1.52/1.42/1.38
we | Qwen-1.5b         | 1 | .63/.62/.64/.63 | 1.11/1.13/1.08/1.10 | 1.56/1.46/1.34/1.35
we | Qwen-1.5b 3-model | 1 | .54/.73/.80/.82 | 0.96/0.92/0.98/0.95 | 1.85/1.53/1.38/1.27
cd | Llama-3           | 0 | .41/.40/.41/.41 | 2.04/1.81/1.52/1.58 | 2.23/2.00/1.77/1.61
cd | Llama-3           | 1 | .39/.41/.42/.41 | 1.55/1.21/1.20/1.07 | 1.65/1.44/1.31/1.18
cd | Llama-2           | 0 | .59/.50/.54/.48 | 1.15/1.62/1.08/0.93 | 1.26/1.65/1.68/1.30
cd | Llama-2           | 1 | .56/.51/.53/.49 | 0.94/1.16/1.23/1.10 | 1.15/1.20/1.37/1.11
cd | OPT               | 0 | -               | 0.97/1.05/1.47/1.40 | 3.28/2.61/3.42/3.95
cd | OPT               | 1 | -               | 1.47/1.55/2.11/1.85 | 1.69/1.76/2.16/1.85
""", roles=("parallel", "naive", "cos"))

# Tables 5, 6: raw tokens/s, standard -> SD -> CoS.
TOKENS_PER_SECOND = _table("""
we | Llama-Vicuna      | 1 | 22.6/22.1/20.5/20.8 | 28.7/26.7/24.3/23.9 | 35.7/33.5/28.8/30.3
we | Qwen-3b           | 1 | 49.6/49.0/47.8/47.0 | 56.1/52.0/52.1/50.7 | 80.4/74.5/67.8/64.8
we | Qwen-1.5b         | 1 | 82.6/77.9/79.6/76.6 | 91.7/88.1/86.0/84.3 | 128.8/113.8/106.7/103.4
we | Qwen-1.5b 3-model | 1 | 57.0/53.9/53.7/56.3 | 55.1/51.1/52.7/51.9 | 105.5/68.3/74.4/86.0
cd | Llama-3           | 0 | 39.4/38.7/39.0/38.1 | 80.3/70.1/59.2/60.2 | 87.8/77.5/69.0/61.3
cd | Llama-3           | 1 | 39.0/38.6/39.0/38.1 | 60.4/46.7/46.8/40.8 | 64.3/55.6/51.1/45.0
cd | Llama-2           | 0 | 49.3/48.1/49.7/46.2 | 56.7/78.0/53.7/43.0 | 62.1/79.4/83.5/60.1
cd | OPT               | 0 | 23.5/23.5/19.6/19.7 | 23.2/24.7/28.8/27.6 | 78.5/61.4/66.9/77.8
""", roles=("standard", "naive", "cos"))

# Tables 7, 8: without alternate proposals (Naive-CoS) vs CoS, HumanEval / GSM8K only.
ABLATION = _table("""
we | Llama-Vicuna | 1 | 1.46/1.39 | 1.58/1.52
we | Qwen-3b      | 1 | 1.40/1.32 | 1.62/1.52
cd | Llama-3      | 0 | 1.98/1.72 | 2.23/2.00
cd | Llama-3      | 1 | 1.41/1.24 | 1.65/1.44
cd | Llama-2      | 0 | 1.18/1.59 | 1.26/1.65
cd | Llama-2      | 1 | 0.89/1.21 | 1.15/1.20
""", roles=("naive", "cos"), datasets=("humaneval", "gsm8k"))

# Figures, read off the plots (±0.03).
FIGURES = {
    "lambda": "λ sweep (WE, 0.1..0.9): with the better proposer choice ≥ 1.5× at every λ; minimum ≈ 1.55–1.65 "
              "near λ ≈ 0.4–0.5.",
    "alpha": "μ sweep (CD Llama-3, 0.1→0.5): HumanEval T0 ≈ 2.18→1.68; GSM8K T0 ≈ 1.94→1.31.",
    "gamma": "γ sweep (1..6): WE flat ≈ 1.45–1.72; CD T0 Llama-3 HumanEval rises ≈ 1.55→2.26.",
}


def paper_pairs(family: str) -> list[str]:
    """The published pair names of a family ("we" | "cd"), in the paper's order."""
    return list(dict.fromkeys(pair for fam, pair, _ in SPEEDUP if fam == family))


def published(table: dict, family: str, pair: str | None, temperature: float, role: str) -> dict[str, float] | None:
    """{dataset: value} of one row of a published table; None when the paper has no such row."""
    if pair is None:
        return None
    return table.get((family, pair, temperature), {}).get(role)
