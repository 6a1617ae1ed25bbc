"""The chapters' tables; they live one layer down, in milktea.tables (the library's
advice prints them too), and are re-exported here for the notebooks."""
from ..tables import fmt, html_table, markdown_table, show  # noqa: F401
