"""The embedding workload: ratings of items by users, learned by matrix factorisation or neural
collaborative filtering; large embedding tables give sparse gradients."""
