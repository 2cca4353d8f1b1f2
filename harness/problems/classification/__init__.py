"""Classification of MNIST digits, the course's workload: the data (`mnist`), the networks
(`networks`: the course's MLPs net1-net3 and LeNet) and the problem that trains and measures them
(`problem`: cross-entropy loss, accuracy)."""
