import math

import pytest

from servetune.cost.formula import token_cost


def test_shares_add_up_to_the_hour():
    c = token_cost(usd_per_hour=3.6, input_tok_s=800.0, output_tok_s=200.0, r=4.0)
    # $0.001 a second: output $/token = 0.001 / (200 + 800/4) = 2.5e-6
    assert c.output_usd_per_mtok == pytest.approx(2.5)
    assert c.input_usd_per_mtok == pytest.approx(2.5 / 4)
    assert c.blended_usd_per_mtok == pytest.approx(1.0)
    spent = (800 * c.input_usd_per_mtok + 200 * c.output_usd_per_mtok) / 1e6
    assert spent == pytest.approx(3.6 / 3600)


def test_r_one_prices_both_kinds_alike():
    c = token_cost(7.2, 1000.0, 1000.0, r=1.0)
    assert c.input_usd_per_mtok == pytest.approx(c.output_usd_per_mtok)
    assert c.blended_usd_per_mtok == pytest.approx(c.output_usd_per_mtok)


def test_nothing_served_cannot_be_priced():
    c = token_cost(2.0, 0.0, 0.0, r=4.0)
    assert c.output_usd_per_mtok is None and c.blended_usd_per_mtok is None
    assert math.isfinite(token_cost(2.0, 10.0, 0.0, r=4.0).output_usd_per_mtok or math.inf)
