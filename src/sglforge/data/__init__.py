"""Files sglforge ships: ``skeleton/`` (what only ``sglforge init`` writes) and, in a wheel,
``project/`` (copies of the repository's images/, smoke/ and stand-in model; see
sglforge.defaults)."""
