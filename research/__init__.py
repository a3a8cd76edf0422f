"""Research code outside the library: studies that use tlm (tlm never imports them)."""
