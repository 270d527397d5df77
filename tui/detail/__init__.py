"""One problem: workloads, attempt history, the planner's reasons and its log."""
