"""Report intake: parse, plan, commit (:class:`~sidecar.intake.pipeline.Intake`).

- :mod:`.parse`: a report's JSON shape, and decision-boundary step 2 (topology mapped?);
- :mod:`.sessions`: session keys, and the one redaction every report goes through;
- :mod:`.plan`: what a batch will change, before anything is written;
- :mod:`.counters`: what a batch counts, applied in one transaction;
- :mod:`.commit`: learning, staging, the cold publication and the compile;
- :mod:`.archive`: an archived chain's identity and cold record.
"""

from sidecar.intake.pipeline import Intake, SourceForgotten
from sidecar.intake.sessions import StepPolicy, session_key

__all__ = ["Intake", "SourceForgotten", "StepPolicy", "session_key"]
