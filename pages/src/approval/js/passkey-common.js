// Shared by both passkey ceremonies. Base64url in and out, as webauthn-rs reads and writes it;
// the server's options from the page's JSON data block; the page's button, form and status line.
const d = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
const e = (b) => btoa(String.fromCharCode(...new Uint8Array(b)))
  .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const o = JSON.parse(document.getElementById('options').textContent).publicKey;
const b = document.getElementById('passkey');
const f = document.getElementById('passkey-form');
const m = document.getElementById('status');
o.challenge = d(o.challenge);
