//! Misused `#[confirm]` attributes are compile errors that point at the attribute.

#[test]
fn misuse_is_a_compile_error_at_the_attribute() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
