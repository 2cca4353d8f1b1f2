"""Fair tuning: search spaces and a tuning study's trials (`search`), the settings it chose,
passed to its evaluation phase (`selection`) and read by a config as `${tuned:...}`
(`resolvers`), where a study's values came from, followed back to the search that drew them
(`lineage`), and the expected quality after k trials (`tuning_curves`). Every choice is made on
validation data."""
