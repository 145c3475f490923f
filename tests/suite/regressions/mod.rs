//! Regression suites: the mutants the tests were written to kill, and the attack pass on #19
//! (browser approvals, guards). The attacks on standing approvals are `standing::attacks`; those on
//! approvers, `browser::approver_attacks`.

mod attack_pass_19;
mod mutants;
