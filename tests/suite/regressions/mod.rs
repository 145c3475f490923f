//! Regression suites: the mutants the tests were written to kill, and the attack pass on #19.

mod attack_pass_19;
mod mutants;
