"""Fair tuning: search spaces and a tuning study's trials (`search`), the settings it chose,
passed to its evaluation phase (`selection`) and read by a config as `${tuned:...}`
(`resolvers`), and the expected quality after k trials (`tuning_curves`). Every choice is made on
validation data."""
