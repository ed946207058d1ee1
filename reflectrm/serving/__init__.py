"""ReflectRM as a service: pairwise rewards for policy training (`rewards`) and the HTTP reward server (`server`)."""
