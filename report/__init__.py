"""Reports you can look at: one self-contained HTML file of runs, benches and sweeps.

``write_report(paths, out, **options)`` reads the run folders through the analysis API
(summaries, plan, comparisons), arranges the numbers by section (``build``), and renders one
HTML page that embeds its data and draws it offline with Apache ECharts (``html``). Nothing
heavy is imported until a report is made.
"""

from vprof.report.build import build_data, write_report
from vprof.report.options import ReportOptions, check_options

__all__ = ["ReportOptions", "build_data", "check_options", "write_report"]
