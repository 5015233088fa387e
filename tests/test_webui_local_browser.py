"""The real Locust web UI of one Locust process in headless Chromium: the LLM tab, its charts,
the Statistics tab, the CSV and the downloaded report hold what the run's records hold.

Nothing here is a rate or a latency bound a busy core can upset (the emulator's latencies are
checked from below only), so it runs beside the unit tests; the same checks with two workers,
and Locust's header rate against the records', are test_webui_browser's, on quiet cores.
"""

from __future__ import annotations

import pytest
from test_webui_browser import browser, check_llm_tab, locust_web  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("locust_web", ["local"], indirect=True)
def test_llm_tab_fills_with_live_percentiles(locust_web, browser, tmp_path):  # noqa: F811
    check_llm_tab(locust_web, browser, tmp_path, rate_read=False)
