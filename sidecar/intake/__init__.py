"""Report intake: parse, plan, commit (:class:`~sidecar.intake.pipeline.Intake`).

- :mod:`.parse`: a report's JSON shape, and decision-boundary step 2 (topology mapped?);
- :mod:`.sessions`: session keys, and the one redaction every report goes through;
- :mod:`.plan`: what a batch will change, before anything is written;
- :mod:`.counters`: what a batch counts, applied in one transaction;
- :mod:`.commit`: a batch's unit of work, step by step in one transaction: learning,
  the counters, the compile, the cold records and the budget;
- :mod:`.requests`: the usage rows of finished sessions' requests.
"""

from sidecar.intake.pipeline import Committed, Intake, SourceForgotten
from sidecar.intake.sessions import StepPolicy, session_key

__all__ = ["Committed", "Intake", "SourceForgotten", "StepPolicy", "session_key"]
