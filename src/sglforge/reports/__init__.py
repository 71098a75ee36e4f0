"""The reports of a run, in one home: each a view of a result and the records of its gates,
none holding data of its own.

- :mod:`sglforge.reports.publish`: a publish's ``--json`` document, its JUnit suite (a case
  per stage and per smoke check) and its Markdown step summary;
- :mod:`sglforge.reports.bench`: a bench's table and verdict for a terminal, its step summary
  with the Mermaid charts, its JUnit suite and figures, and ``bench.md``/``chart.svg`` beside
  its ``report.json``;
- :mod:`sglforge.reports.upgrade`: an upgrade's Markdown report (``report-<ref>.md``, which the
  upgrade writes beside its JSON form).

Each piece is written once: a smoke check's JUnit case by :func:`sglforge.smoke.report.
check_case` (``sglforge smoke`` and a publish alike), the serving table by
:func:`sglforge.reports.bench.table_rows`, a chart by :mod:`sglforge.charts`; the JUnit and
Markdown primitives are :mod:`sglforge.formats`. The data stay where they are found:
:class:`~sglforge.publish.PublishResult`, :class:`~sglforge.bench.report.BenchReport` (and its
``report.json`` form, which the bench writes as it ends),
:class:`~sglforge.upgrade_result.UpgradeResult`, the gates' records.
"""
