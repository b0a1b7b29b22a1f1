"""JUnit XML reports (the format CI systems show as test results), e.g. for `luminal check --junit FILE`."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# characters XML 1.0 cannot hold, even escaped
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class JUnitCase:
    """One test case. ``failure``: the check ran and did not pass; ``error``: it could not run."""

    name: str
    classname: str = "luminal"
    time_s: float = 0.0
    failure: str | None = None
    error: str | None = None
    skipped: str | None = None
    output: str = ""


def _clean(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def junit_xml(suite_name: str, cases: list[JUnitCase]) -> str:
    failures = sum(c.failure is not None for c in cases)
    errors = sum(c.error is not None and c.failure is None for c in cases)
    skipped = sum(c.skipped is not None and c.failure is None and c.error is None for c in cases)
    total = sum(c.time_s for c in cases)
    root = ET.Element("testsuites", name=_clean(suite_name), tests=str(len(cases)), failures=str(failures),
                      errors=str(errors), skipped=str(skipped), time=f"{total:.3f}")
    suite = ET.SubElement(root, "testsuite", name=_clean(suite_name), tests=str(len(cases)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped), time=f"{total:.3f}")
    for c in cases:
        case = ET.SubElement(suite, "testcase", name=_clean(c.name), classname=_clean(c.classname),
                             time=f"{c.time_s:.3f}")
        if c.failure is not None:
            el = ET.SubElement(case, "failure", message=_clean(c.failure.splitlines()[0] if c.failure else ""))
            el.text = _clean(c.failure)
        elif c.error is not None:
            el = ET.SubElement(case, "error", message=_clean(c.error.splitlines()[0] if c.error else ""))
            el.text = _clean(c.error)
        elif c.skipped is not None:
            ET.SubElement(case, "skipped", message=_clean(c.skipped))
        if c.output:
            ET.SubElement(case, "system-out").text = _clean(c.output)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def check_cases(reports: list) -> list[JUnitCase]:
    """One case per `luminal check` report (modelcheck.CheckReport): a failure lists the outputs out of
    tolerance."""
    cases = []
    for rep in reports:
        bad = [o for o in rep.outputs if not o.ok]
        lines = [f"output {o.name!r}: {o.reason or f'max abs err {o.max_abs:.3g}, max rel err {o.max_rel:.3g}'}"
                 for o in bad]
        failure = None if rep.ok else ("\n".join(lines) or "the model has no outputs to compare")
        cases.append(JUnitCase(name=Path(rep.model).name, classname=f"luminal.check.{rep.backend}",
                               time_s=float(sum(rep.seconds.values())), failure=failure,
                               output="\n".join(str(w) for w in rep.warnings)))
    return cases


def write_junit(path: str | Path, suite_name: str, cases: list[JUnitCase]) -> None:
    from .common import write_output

    write_output(junit_xml(suite_name, cases), str(path))
