"""Training where a client lives: the networks (models), a client's data views, state and local recipes
(client), clients of one recipe trained together as a cohort (cohort), and evaluation of the target model
(evaluation).
"""
