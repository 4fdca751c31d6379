"""Complex event processing (DDIA ch. 11): patterns over keyed event sequences — steps with
conditions and quantifiers, absences, a time bound and measures — found as the events arrive,
with partial matches kept across microbatches and decided by the watermark."""

from lakelog.patterns.pattern import Absent, Measure, Pattern, Step, quantifier

__all__ = ["Absent", "Measure", "Pattern", "Step", "quantifier"]
