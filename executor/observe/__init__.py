"""What the policy sees of a live run: per-candidate estimates and measured resize costs.

- `estimates`:     per-candidate stage times and resize costs for the observation;
- `cost_feedback`: measured resize costs fed back into those predictions, transition by transition;
- `setup_prior`:   the resize-cost prior from the run's own setup, before any resize is measured;
- `measure`:       how a resize is measured from step times alone.

It may import the top of `dynaresize.executor` (config, batch), `dynaresize.policies`,
`dynaresize.traces` and `dynaresize.twin` (the twin's cost models, inside functions); it imports
neither Ray nor the workers.
"""
