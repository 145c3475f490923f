//! Regression suites: the mutants the tests were written to kill, and the attack passes on #19
//! (browser approvals, guards) and #21 (standing approvals).

mod attack_pass_19;
mod attack_pass_21;
mod mutants;
