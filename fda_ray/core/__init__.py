"""The core: what every layer shares and nothing above it defines. What a run is (config: RunConfig), the round's
contract types (contract), named registries (registry: the methods, datasets and models, each filled by its home
package when first read), seeds per (trial, round, client, purpose) (seeding), the flat parameter layout
(layout), a run's rows (history), the auxiliary-label tasks (multitask) and one-line command-line errors
(parsing). No module here imports another fda_ray package.
"""
