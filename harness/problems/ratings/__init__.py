"""Ratings of items by users, the embedding workload: the data (`data`: synthetic ratings or
MovieLens), the models (`models`: matrix factorisation, neural collaborative filtering) whose large
embedding tables give sparse gradients, and the problem (`problem`: squared error, RMSE)."""
