//! Misused `#[confirm]` attributes are compile errors that point at the attribute; correct uses
//! compile, in either order with rmcp's `#[tool_router]`.

#[test]
fn misuse_is_a_compile_error_at_the_attribute() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
    cases.pass("tests/ui-pass/*.rs");
}
