"""The bundled scenarios' collection: ``case_studies/`` crash-tests published libraries at
pinned versions (``make case-studies``), so ``crashpoints gate scenarios`` and a run over the
whole folder leave it out; naming it (``pytest -p crashpoints scenarios/case_studies``) runs it."""

collect_ignore = ["case_studies"]
